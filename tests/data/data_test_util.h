#pragma once

// Helpers for the data tests: temporary folders, synthetic images written at test time, and
// a recorder for scan warnings.

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "loom/config/job.h"
#include "loom/data/dataset.h"
#include "loom/data/image.h"
#include "temp_dir.h"

namespace loom::test {

// A w x h image whose pixels encode their position (R = x * 7 + seed, G = y * 13 + seed,
// B = (x + y) * 3 + seed, all mod 256): every pixel of a small image is distinct.
data::Image pattern_image(int w, int h, int seed = 0);
// A w x h image of one colour.
data::Image solid_image(int w, int h, std::uint8_t r, std::uint8_t g, std::uint8_t b);

// Writes bytes, creating parent folders.
void write_file(const std::filesystem::path& path, std::string_view bytes);
std::string read_file(const std::filesystem::path& path);

// A PNG with 1 (grey), 2 (grey + alpha), 3 or 4 (RGBA) channels, from raw interleaved bytes.
std::string png_with_channels(int w, int h, int channels, const std::vector<std::uint8_t>& data);

// A JPEG with an EXIF APP1 segment holding `orientation` (big- or little-endian TIFF header).
std::string jpeg_with_orientation(const data::Image& image, int orientation, bool little_endian);

// A dataset config for `folder` with ai-toolkit's defaults.
config::DatasetConfig dataset_config(const std::filesystem::path& folder);

// Collects the warnings scan_dataset reports.
struct WarningLog {
    std::vector<data::ScanWarning> warnings;
    data::ScanOptions options();
    std::vector<std::string> messages() const;
};

}  // namespace loom::test
