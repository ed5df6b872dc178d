#pragma once

// Finding the training images of a dataset folder and their captions (ai-toolkit.md §1.5).
//
// scan_dataset walks `folder_path` recursively, as ai-toolkit's os.walk does, in sorted (byte)
// order of the relative paths, skipping hidden files and folders (names starting with '.') and
// `_controls` folders; symlinked folders are not followed (no cycles), symlinked files are.
// Images are the files ending in .jpg, .jpeg, .png or .webp (any case). Each one is read and
// fully decoded once, so that bad files are found before training starts, and hashed (SHA-256
// of the bytes, the cache key's content part).
//
// Captions: the sidecar `<stem><caption_ext>` next to the image; when it is missing or blank,
// `default_caption`, else "". A leading UTF-8 byte-order mark is dropped.
//
// A video dataset (num_frames > 1 or auto_frame_count, ai-toolkit's rule) also holds clips:
// .mp4, .webm, .mov and .mkv files (any case), each decoded whole once (data/video.h) so that a
// truncated or unreadable clip is found here, and hashed like an image. Its images train as
// one-frame clips, as in ai-toolkit.
//
// Paired control images (control_path, for Kontext and Qwen-Image-Edit): each image's pair is
// the file of the same stem (any of the image extensions) directly in control_path — in each of
// its folders when it lists several (up to three, Edit-2509's pictures) — read, decoded and
// hashed like the image. A missing pair, two candidates for one stem, an unreadable or corrupt
// control image, or control_path on a video dataset throws DatasetError naming the files: a pair
// cannot be dropped silently, as the target without its source teaches the wrong edit. Paired
// inpaint images (inpaint_path, for Flex.2) pair the same way and must have an alpha channel.
//
// Every file that cannot be used is skipped with exactly one warning naming it (logger "data",
// and ScanOptions::on_warning): an empty file, an unreadable one, a truncated or corrupt image
// or clip, a clip without frames or when loom was built without FFmpeg, an image in a format
// loom does not read (.gif, .bmp, .tif, .tiff, .heic, .heif, .avif, .jxl files, or a
// PNG/JPEG/WebP name on other content), a caption file that cannot be read or is not valid
// UTF-8. A missing folder, a folder without images (or clips), or one where none could be used
// throws DatasetError before anything else happens.

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/data/image.h"
#include "loom/data/video.h"

namespace loom::config {
struct DatasetConfig;
}

namespace loom::data {

// A dataset that cannot be trained on (missing folder, no usable images). folder() is the
// configured folder_path.
class DatasetError : public Error {
  public:
    DatasetError(std::string folder, const std::string& message);
    const std::string& folder() const { return folder_; }

  private:
    std::string folder_;
};

// One usable image, or clip of a video dataset.
struct ImageRecord {
    std::filesystem::path path;
    std::optional<std::filesystem::path> caption_path;  // the sidecar, when it exists
    std::string caption;                                // raw: sidecar, default_caption or ""
    int width = 0;                                      // after EXIF orientation
    int height = 0;
    ImageFormat format = ImageFormat::kUnknown;  // kUnknown for a clip
    std::string content_hash;        // SHA-256 of the file's bytes, 64 lowercase hex digits
    std::optional<VideoInfo> video;  // a clip: its decoded frame count and frame rate
    // Its control images (datasets[].control_path: the file of the same stem in each of its
    // folders, in their order — one for Kontext, up to three for Qwen-Image-Edit-2509), read and
    // hashed like the image; empty without control_path.
    std::vector<std::shared_ptr<const ImageRecord>> controls;
    // Its inpaint image (datasets[].inpaint_path: the PNG or WebP of the same stem there, with an
    // alpha channel), read and hashed like the image; null without inpaint_path.
    std::shared_ptr<const ImageRecord> inpaint;

    bool is_clip() const { return video.has_value(); }
};

// A skipped file: `message` is the whole warning line, "skipping <path>: <why>; <what to do>".
struct ScanWarning {
    std::filesystem::path path;
    std::string message;
};

struct ScanOptions {
    // Called once per skipped file, in scan order, besides the log line. Optional.
    std::function<void(const ScanWarning&)> on_warning;
};

struct ScannedDataset {
    std::filesystem::path folder;
    std::vector<ImageRecord> images;  // sorted by path
    std::size_t skipped = 0;

    std::vector<ImageSize> sizes() const;
};

// See the top of this file. Throws DatasetError (missing folder, not a folder, no images, no
// usable image); everything else about single files is a warning.
ScannedDataset scan_dataset(const config::DatasetConfig& dataset, const ScanOptions& options = {});

// The extensions scan_dataset reads as images, and the ones it recognises as images it cannot
// read (clips: is_video_name, data/video.h).
bool is_supported_image_name(const std::filesystem::path& path);
bool is_unsupported_image_name(const std::filesystem::path& path);

}  // namespace loom::data
