#include "data_test_util.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>

namespace loom::test {

namespace fs = std::filesystem;

data::Image pattern_image(int w, int h, int seed) {
    data::Image im(w, h);
    for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
            std::uint8_t* p = im.at(x, y);
            p[0] = std::uint8_t((x * 7 + seed) % 256);
            p[1] = std::uint8_t((y * 13 + seed) % 256);
            p[2] = std::uint8_t(((x + y) * 3 + seed) % 256);
        }
    }
    return im;
}

data::Image solid_image(int w, int h, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
    data::Image im(w, h);
    for (std::size_t i = 0; i < im.pixels.size(); i += 3) {
        im.pixels[i] = r;
        im.pixels[i + 1] = g;
        im.pixels[i + 2] = b;
    }
    return im;
}

void write_file(const fs::path& path, std::string_view bytes) {
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path.string());
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

namespace {
void append(void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), std::size_t(size));
}
}  // namespace

std::string png_with_channels(int w, int h, int channels, const std::vector<std::uint8_t>& data) {
    std::string out;
    if (!stbi_write_png_to_func(append, &out, w, h, channels, data.data(), w * channels))
        throw std::runtime_error("png encoding failed");
    return out;
}

std::string jpeg_with_orientation(const data::Image& image, int orientation, bool little_endian) {
    const std::string jpeg = data::encode_jpeg(image, 95);
    // TIFF header + IFD0 with one entry: Orientation (0x0112), SHORT, count 1.
    auto u16 = [&](std::uint32_t v) {
        return little_endian ? std::string{char(v & 0xFF), char(v >> 8)}
                             : std::string{char(v >> 8), char(v & 0xFF)};
    };
    auto u32 = [&](std::uint32_t v) {
        std::string s(4, '\0');
        for (int i = 0; i < 4; ++i)
            s[std::size_t(little_endian ? i : 3 - i)] = char((v >> (8 * i)) & 0xFF);
        return s;
    };
    std::string tiff = little_endian ? std::string("II") : std::string("MM");
    tiff += u16(42) + u32(8);
    tiff += u16(1);  // one entry
    tiff += u16(0x0112) + u16(3) + u32(1) + u16(std::uint32_t(orientation)) + u16(0);
    tiff += u32(0);  // no next IFD
    const std::string payload = std::string("Exif\0\0", 6) + tiff;
    const std::size_t length = payload.size() + 2;
    std::string app1 = "\xFF\xE1";
    app1 += char(length >> 8);
    app1 += char(length & 0xFF);
    app1 += payload;
    return jpeg.substr(0, 2) + app1 + jpeg.substr(2);  // right after SOI
}

config::DatasetConfig dataset_config(const fs::path& folder) {
    config::DatasetConfig c;
    c.folder_path = folder.string();
    c.num_workers = 2;
    return c;
}

data::ScanOptions WarningLog::options() {
    data::ScanOptions o;
    o.on_warning = [this](const data::ScanWarning& w) { warnings.push_back(w); };
    return o;
}

std::vector<std::string> WarningLog::messages() const {
    std::vector<std::string> out;
    for (const auto& w : warnings) out.push_back(w.message);
    return out;
}

}  // namespace loom::test
