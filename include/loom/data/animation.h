#pragma once

// Animated previews: a clip's frames as an animated WebP (lossless, every frame a key frame
// candidate, looping), the format ai-toolkit writes video samples in and browsers play. Built
// with libwebp's animation encoder (libwebpmux) and read back with its demuxer (libwebpdemux);
// without them animated_webp_supported() is false and both calls throw.

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "loom/data/image.h"

namespace loom::data {

bool animated_webp_supported();

// `frames` (one size, at least one) shown `fps` times a second, looping forever. Throws
// loom::Error when the frames differ in size, fps is not positive or encoding fails.
std::string encode_animated_webp(const std::vector<Image>& frames, int fps);
// Writes it atomically (io/atomic_file.h); IoError names the path.
void write_animated_webp(const std::filesystem::path& path, const std::vector<Image>& frames,
                         int fps);
// Every frame of an animated (or still) WebP, as RGB. FormatError names `name` when the bytes
// are not a WebP loom can demux.
std::vector<Image> decode_animated_webp(std::string_view bytes, const std::string& name);

}  // namespace loom::data
