// Writes a small video dataset for the end-to-end scripts that drive `loom train` on clips
// (FFmpeg's encoders, tests/data/video_fixture.h):
//   make_test_clips OUT_DIR SIZE
// OUT_DIR/walk.mkv (17 frames) and OUT_DIR/turn.mkv (12 frames), lossless, 16 fps, SIZE x SIZE;
// OUT_DIR/still.png, an image (a one-frame clip of the video dataset); a caption beside each;
// and OUT_DIR/broken.mkv, a clip cut in half, which the scan skips with a warning.

#include <cstdlib>
#include <fstream>
#include <iostream>

#include "loom/data/image.h"
#include "video_fixture.h"

int main(int argc, char** argv) {
    if (argc != 3) {
        std::cerr << "usage: make_test_clips OUT_DIR SIZE\n";
        return 2;
    }
    namespace fs = std::filesystem;
    const fs::path out = argv[1];
    const int size = std::atoi(argv[2]);
    if (size < 16 || size % 2 != 0) {
        std::cerr << "make_test_clips: SIZE must be an even number of pixels, at least 16\n";
        return 2;
    }
    fs::create_directories(out);
    using loom::testing::ramp_frames;
    using loom::testing::write_test_video;
    write_test_video(out / "walk.mkv", ramp_frames(17, size, size), 16, "ffv1");
    std::ofstream(out / "walk.txt") << "[trigger] dog walking";
    write_test_video(out / "turn.mkv", ramp_frames(12, size, size), 16, "ffv1");
    std::ofstream(out / "turn.txt") << "[trigger] dog turning";
    loom::data::write_png(out / "still.png", ramp_frames(1, size, size).front());
    std::ofstream(out / "still.txt") << "[trigger] dog sitting";
    write_test_video(out / "broken.mkv", ramp_frames(24, size, size), 16, "ffv1");
    fs::resize_file(out / "broken.mkv", fs::file_size(out / "broken.mkv") / 2);
    std::cout << out.string() << "\n";
    return 0;
}
