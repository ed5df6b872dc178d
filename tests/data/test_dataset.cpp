// scan_dataset on folders written at test time: what is found, captions and sidecars, and every
// kind of bad input with its exact warning or error.

#include <gtest/gtest.h>
#include <unistd.h>

#include "data_test_util.h"
#include "loom/core/sha256.h"
#include "loom/data/dataset.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using test::write_file;

std::string png(int w, int h, int seed = 0) {
    return encode_png(test::pattern_image(w, h, seed));
}

std::vector<std::string> names(const ScannedDataset& d) {
    std::vector<std::string> out;
    for (const ImageRecord& r : d.images) out.push_back(fs::relative(r.path, d.folder).string());
    return out;
}

std::string dataset_error(const config::DatasetConfig& cfg, test::WarningLog* log = nullptr) {
    try {
        scan_dataset(cfg, log ? log->options() : ScanOptions{});
    } catch (const DatasetError& e) {
        EXPECT_EQ(e.folder(), cfg.folder_path);
        return e.what();
    }
    return "no error";
}

TEST(ScanDataset, FindsImagesRecursivelyInSortedOrderSkippingHiddenAndControls) {
    TempDir dir;
    write_file(dir / "b.png", png(33, 17));
    write_file(dir / "A.PNG", png(20, 10));
    const std::string jpeg = encode_jpeg(test::pattern_image(40, 30));
    write_file(dir / "a.jpg", jpeg);
    write_file(dir / "sub" / "c.jpeg", encode_jpeg(test::pattern_image(8, 24)));
    if (webp_supported())
        write_file(dir / "sub" / "d.webp", encode_webp(test::pattern_image(12, 8)));
    write_file(dir / ".hidden" / "e.png", png(4, 4));
    write_file(dir / "sub" / ".thumbs" / "f.jpg", jpeg);
    write_file(dir / ".g.png", png(4, 4));
    write_file(dir / "sub" / "_controls" / "h.png", png(4, 4));
    write_file(dir / "notes.txt", "not an image");
    write_file(dir / "model.safetensors", "xx");

    test::WarningLog log;
    const ScannedDataset d = scan_dataset(test::dataset_config(dir.path()), log.options());
    std::vector<std::string> want = {"A.PNG", "a.jpg", "b.png", "sub/c.jpeg"};
    if (webp_supported()) want.push_back("sub/d.webp");
    EXPECT_EQ(names(d), want);
    EXPECT_TRUE(log.warnings.empty());
    EXPECT_EQ(d.skipped, 0u);
    EXPECT_EQ(d.images[0].width, 20);
    EXPECT_EQ(d.images[0].height, 10);
    EXPECT_EQ(d.images[0].format, ImageFormat::kPng);
    EXPECT_EQ(d.images[1].format, ImageFormat::kJpeg);
    EXPECT_EQ(d.images[1].content_hash, sha256_hex(jpeg));
    EXPECT_EQ(d.images[3].width, 8);
    EXPECT_EQ(d.images[3].height, 24);
    const std::vector<ImageSize> sizes = d.sizes();
    ASSERT_EQ(sizes.size(), d.images.size());
    EXPECT_EQ(sizes[2].width, 33);
    EXPECT_EQ(sizes[2].height, 17);
}

TEST(ScanDataset, CaptionSidecarsAndDefaultCaption) {
    TempDir dir;
    for (const char* name : {"a", "b", "c", "d", "e.v2"})
        write_file(dir / (std::string(name) + ".png"), png(4, 4));
    write_file(dir / "a.txt", "a cat, on a mat\n");
    write_file(dir / "c.txt", "  \n");                    // blank: default_caption
    write_file(dir / "d.txt", "\xEF\xBB\xBFnaïve café");  // byte-order mark dropped
    write_file(dir / "e.v2.txt", "dotted stem");
    write_file(dir / "b.caption", "other extension");

    config::DatasetConfig cfg = test::dataset_config(dir.path());
    cfg.default_caption = "a photo";
    ScannedDataset d = scan_dataset(cfg);
    ASSERT_EQ(d.images.size(), 5u);
    EXPECT_EQ(d.images[0].caption, "a cat, on a mat\n");
    EXPECT_EQ(d.images[0].caption_path, std::optional<fs::path>(dir / "a.txt"));
    EXPECT_EQ(d.images[1].caption, "a photo");
    EXPECT_FALSE(d.images[1].caption_path);
    EXPECT_EQ(d.images[2].caption, "a photo");
    EXPECT_EQ(d.images[3].caption, "naïve café");
    EXPECT_EQ(d.images[4].caption, "dotted stem");

    cfg.default_caption.reset();
    d = scan_dataset(cfg);
    EXPECT_EQ(d.images[1].caption, "");
    EXPECT_EQ(d.images[2].caption, "  \n");  // raw; process_caption normalises it to ""

    cfg.caption_ext = "caption";  // a missing dot is added, as ai-toolkit does
    d = scan_dataset(cfg);
    EXPECT_EQ(d.images[0].caption, "");
    EXPECT_EQ(d.images[1].caption, "other extension");
}

TEST(ScanDataset, ExifOrientationIsAppliedToTheSize) {
    TempDir dir;
    write_file(dir / "rot.jpg", test::jpeg_with_orientation(test::pattern_image(32, 16), 6, true));
    const ScannedDataset d = scan_dataset(test::dataset_config(dir.path()));
    ASSERT_EQ(d.images.size(), 1u);
    EXPECT_EQ(d.images[0].width, 16);
    EXPECT_EQ(d.images[0].height, 32);
}

TEST(ScanDataset, EveryBadFileIsSkippedWithExactlyOneWarningNamingIt) {
    TempDir dir;
    const std::string good_png = png(16, 16);
    const std::string good_jpeg = encode_jpeg(test::pattern_image(64, 64), 90);
    write_file(dir / "good.png", good_png);
    write_file(dir / "t_png.png", good_png.substr(0, good_png.size() / 2));
    write_file(dir / "t_jpeg.jpg", good_jpeg.substr(0, good_jpeg.size() * 2 / 3));
    write_file(dir / "zero.png", "");
    write_file(dir / "anim.gif", "GIF89a....");
    write_file(dir / "scan.BMP", "BM....");
    write_file(dir / "text.png", "this is text");
    write_file(dir / "gif_inside.png", "GIF89a....");
    write_file(dir / "latin1.png", good_png);
    write_file(dir / "latin1.txt", "caf\xE9 au lait");
    write_file(dir / "second_line.png", good_png);
    write_file(dir / "second_line.txt", "fine\nbad \xFF");
    fs::create_symlink(dir / "gone.png", dir / "link.png");
    const bool root = ::geteuid() == 0;  // root reads files whatever their permissions
    if (!root) {
        write_file(dir / "locked.png", good_png);
        fs::permissions(dir / "locked.png", fs::perms::none);
    }

    test::WarningLog log;
    const ScannedDataset d = scan_dataset(test::dataset_config(dir.path()), log.options());
    EXPECT_EQ(names(d), std::vector<std::string>{"good.png"});

    auto p = [&](const char* name) { return (dir / name).string(); };
    const std::string redo = "; re-export the image or remove it from the dataset";
    std::vector<std::string> want = {
        "skipping " + p("anim.gif") +
            ": .gif images are not supported; convert it to PNG, JPEG "
            "or WebP",
        "skipping " + p("gif_inside.png") +
            ": it is a GIF image, which loom does not read; "
            "convert it to PNG, JPEG or WebP",
        "skipping " + p("latin1.png") + ": its caption file " + p("latin1.txt") +
            " is not valid UTF-8 (line 1, column 4); save it as UTF-8",
        "skipping " + p("link.png") +
            ": cannot read the file (No such file or directory); check that it exists and is "
            "readable",
    };
    if (!root)
        want.push_back("skipping " + p("locked.png") +
                       ": cannot read the file (Permission denied); check that it exists and is "
                       "readable");
    const std::vector<std::string> rest = {
        "skipping " + p("scan.BMP") +
            ": .bmp images are not supported; convert it to PNG, JPEG "
            "or WebP",
        "skipping " + p("second_line.png") + ": its caption file " + p("second_line.txt") +
            " is not valid UTF-8 (line 2, column 5); save it as UTF-8",
        "skipping " + p("t_jpeg.jpg") +
            ": the JPEG image is truncated (its end-of-image marker is missing)" + redo,
        "skipping " + p("t_png.png") + ": the PNG image is truncated (it ends inside a chunk)" +
            redo,
        "skipping " + p("text.png") +
            ": it is not a PNG, JPEG or WebP image (unrecognised content); convert it to one of "
            "those or remove it from the dataset",
        "skipping " + p("zero.png") + ": the file is empty (0 bytes)" + redo,
    };
    want.insert(want.end(), rest.begin(), rest.end());
    EXPECT_EQ(log.messages(), want);
    EXPECT_EQ(d.skipped, want.size());
    ASSERT_EQ(log.warnings.size(), want.size());
    EXPECT_EQ(log.warnings[0].path, dir / "anim.gif");
}

TEST(ScanDataset, MissingFolderIsAnErrorWithWhatToDo) {
    TempDir dir;
    const std::string missing = (dir / "nope").string();
    EXPECT_EQ(dataset_error(test::dataset_config(missing)),
              "dataset folder " + missing +
                  " does not exist; set datasets[].folder_path to a folder of .jpg, .jpeg, .png "
                  "or .webp images");
    write_file(dir / "file.png", png(4, 4));
    EXPECT_EQ(dataset_error(test::dataset_config(dir / "file.png")),
              "dataset folder_path " + (dir / "file.png").string() +
                  " is not a folder; set it to the folder that holds the images");
    EXPECT_EQ(dataset_error(test::dataset_config("")),
              "datasets[].folder_path is empty; set it to a folder of .jpg, .jpeg, .png or .webp "
              "images");
}

TEST(ScanDataset, EmptyFolderIsAnError) {
    TempDir dir;
    const std::string want = "dataset folder " + dir.path().string() +
                             " has no images (.jpg, .jpeg, .png or .webp); add images or fix "
                             "datasets[].folder_path";
    EXPECT_EQ(dataset_error(test::dataset_config(dir.path())), want);
    // Hidden images and other files do not count.
    write_file(dir / ".hidden" / "a.png", png(4, 4));
    write_file(dir / ".b.png", png(4, 4));
    write_file(dir / "a.txt", "a caption without an image");
    EXPECT_EQ(dataset_error(test::dataset_config(dir.path())), want);
}

TEST(ScanDataset, OnlyUnsupportedFormatsIsAnErrorAfterTheirWarnings) {
    TempDir dir;
    write_file(dir / "a.gif", "GIF89a");
    write_file(dir / "b.tiff", "II*");
    test::WarningLog log;
    EXPECT_EQ(dataset_error(test::dataset_config(dir.path()), &log),
              "dataset folder " + dir.path().string() +
                  " has no images loom can read (.jpg, .jpeg, .png or .webp), only 2 in other "
                  "formats; convert them to PNG, JPEG or WebP");
    EXPECT_EQ(log.messages(),
              (std::vector<std::string>{
                  "skipping " + (dir / "a.gif").string() +
                      ": .gif images are not supported; convert it to PNG, JPEG or WebP",
                  "skipping " + (dir / "b.tiff").string() +
                      ": .tiff images are not supported; convert it to PNG, JPEG or WebP"}));
}

TEST(ScanDataset, AllImagesBadIsAnErrorAfterTheirWarnings) {
    TempDir dir;
    write_file(dir / "a.png", "");
    write_file(dir / "b.jpg", "\xFF\xD8\xFF\xE0");
    write_file(dir / "c.webp", "RIFF");
    test::WarningLog log;
    EXPECT_EQ(dataset_error(test::dataset_config(dir.path()), &log),
              "none of the 3 images in " + dir.path().string() +
                  " could be used (each was skipped with a warning above); fix or replace them");
    EXPECT_EQ(log.warnings.size(), 3u);
}

TEST(ScanDataset, ExtensionsAreCaseInsensitive) {
    for (const char* yes : {"a.jpg", "a.JPG", "a.Jpeg", "a.png", "a.WEBP"})
        EXPECT_TRUE(is_supported_image_name(yes)) << yes;
    for (const char* no : {"a.gif", "a.txt", "a", "a.png.txt", "a.mp4"})
        EXPECT_FALSE(is_supported_image_name(no)) << no;
    for (const char* other : {"a.gif", "a.BMP", "a.tif", "a.heic", "a.avif"})
        EXPECT_TRUE(is_unsupported_image_name(other)) << other;
}

// Kontext's paired datasets (issue 40): each image pairs with the control image of its stem in
// control_path, whatever the extension; a missing, doubled or broken pair stops the scan with an
// error naming both files.
TEST(ScanDataset, ControlPathPairsEachImageWithItsStem) {
    TempDir dir;
    write_file(dir / "data" / "a.png", png(16, 8, 1));
    write_file(dir / "data" / "b.jpg", encode_jpeg(test::pattern_image(16, 16, 2)));
    write_file(dir / "control" / "a.jpg", encode_jpeg(test::pattern_image(12, 6, 3)));
    write_file(dir / "control" / "b.png", png(20, 20, 4));
    config::DatasetConfig cfg = test::dataset_config(dir / "data");
    cfg.control_path = {(dir / "control").string()};
    const ScannedDataset d = scan_dataset(cfg);
    ASSERT_EQ(d.images.size(), 2u);
    ASSERT_TRUE(d.images[0].controls.size() == 1 && d.images[1].controls.size() == 1);
    EXPECT_EQ(d.images[0].controls[0]->path, dir / "control" / "a.jpg");
    EXPECT_EQ(d.images[0].controls[0]->width, 12);
    EXPECT_EQ(d.images[0].controls[0]->height, 6);
    EXPECT_EQ(d.images[1].controls[0]->path, dir / "control" / "b.png");
    EXPECT_FALSE(d.images[1].controls[0]->content_hash.empty());
    EXPECT_NE(d.images[0].controls[0]->content_hash, d.images[1].controls[0]->content_hash);
    // Without control_path nothing pairs.
    EXPECT_TRUE(scan_dataset(test::dataset_config(dir / "data")).images[0].controls.empty());
}

// Qwen-Image-Edit-2509's control_path lists up to three folders: each image pairs with its stem in
// every one of them, in order; a fourth folder, or a stem missing from the second, is an error.
TEST(ScanDataset, SeveralControlFoldersPairInTheirOrder) {
    TempDir dir;
    write_file(dir / "data" / "a.png", png(16, 8, 1));
    write_file(dir / "first" / "a.jpg", encode_jpeg(test::pattern_image(12, 6, 3)));
    write_file(dir / "second" / "a.png", png(20, 10, 4));
    config::DatasetConfig cfg = test::dataset_config(dir / "data");
    cfg.control_path = {(dir / "first").string(), (dir / "second").string()};
    const ScannedDataset d = scan_dataset(cfg);
    ASSERT_EQ(d.images.at(0).controls.size(), 2u);
    EXPECT_EQ(d.images[0].controls[0]->path, dir / "first" / "a.jpg");
    EXPECT_EQ(d.images[0].controls[1]->path, dir / "second" / "a.png");
    EXPECT_EQ(d.images[0].controls[1]->width, 20);
    cfg.control_path.push_back((dir / "empty").string());
    std::filesystem::create_directories(dir / "empty");
    try {
        scan_dataset(cfg);
        FAIL() << "a control folder without the stem scanned";
    } catch (const DatasetError& e) {
        EXPECT_NE(std::string(e.what()).find((dir / "empty").string()), std::string::npos)
            << e.what();
    }
    cfg.control_path.push_back((dir / "first").string());
    try {
        scan_dataset(cfg);
        FAIL() << "four control folders scanned";
    } catch (const DatasetError& e) {
        EXPECT_NE(std::string(e.what()).find("lists 4 folders"), std::string::npos) << e.what();
    }
}

TEST(ScanDataset, AMissingDoubledOrBrokenControlImageIsAnErrorNamingTheFiles) {
    TempDir dir;
    write_file(dir / "data" / "a.png", png(8, 8));
    write_file(dir / "data" / "b.png", png(8, 8));
    write_file(dir / "control" / "a.png", png(8, 8));
    config::DatasetConfig cfg = test::dataset_config(dir / "data");
    cfg.control_path = {(dir / "control").string()};
    std::string e = dataset_error(cfg);
    EXPECT_NE(e.find((dir / "data" / "b.png").string() + " has no control image in control_path " +
                     (dir / "control").string()),
              std::string::npos)
        << e;

    write_file(dir / "control" / "b.png", "not a png at all");
    e = dataset_error(cfg);
    EXPECT_NE(e.find("control image " + (dir / "control" / "b.png").string() + " of " +
                     (dir / "data" / "b.png").string()),
              std::string::npos)
        << e;

    write_file(dir / "control" / "b.png", png(8, 8));
    write_file(dir / "control" / "b.jpg", encode_jpeg(test::pattern_image(8, 8)));
    e = dataset_error(cfg);
    EXPECT_NE(e.find("has 2 control images"), std::string::npos) << e;

    fs::remove(dir / "control" / "b.jpg");
    EXPECT_NO_THROW(scan_dataset(cfg));

    cfg.control_path = {(dir / "nowhere").string()};
    e = dataset_error(cfg);
    EXPECT_NE(e.find("control_path " + (dir / "nowhere").string() + " does not exist"),
              std::string::npos)
        << e;
}

// Flex.2's inpaint images (issue 40): paired by stem as control images are, each with an alpha
// channel (its mask) — an image without one is an error naming both files — and the alpha read
// into every channel, fitted and flipped as an image would be.
TEST(ScanDataset, InpaintPathPairsImagesWithAnAlphaChannel) {
    TempDir dir;
    write_file(dir / "data" / "a.png", png(8, 4));
    std::vector<std::uint8_t> alpha(8 * 4, 255);
    for (int x = 0; x < 4; ++x) alpha[std::size_t(x)] = 0;  // the top row's left half inpaints
    write_file(dir / "inpaint" / "a.png", encode_png_with_alpha(test::pattern_image(8, 4), alpha));
    config::DatasetConfig cfg = test::dataset_config(dir / "data");
    cfg.inpaint_path = {(dir / "inpaint").string()};
    const ScannedDataset d = scan_dataset(cfg);
    ASSERT_TRUE(d.images.at(0).inpaint);
    EXPECT_EQ(d.images[0].inpaint->path, dir / "inpaint" / "a.png");
    EXPECT_TRUE(d.images[0].controls.empty());
    const Image mask = read_alpha(dir / "inpaint" / "a.png");
    ASSERT_EQ(mask.width, 8);
    EXPECT_EQ(mask.at(0, 0)[0], 0);
    EXPECT_EQ(mask.at(0, 0)[2], 0);
    EXPECT_EQ(mask.at(4, 0)[1], 255);
    EXPECT_EQ(mask.at(0, 1)[0], 255);

    // An RGB file has no mask: an error naming both files and what to give instead.
    write_file(dir / "inpaint" / "a.png", png(8, 4));
    std::string e = dataset_error(cfg);
    EXPECT_NE(e.find("inpaint image " + (dir / "inpaint" / "a.png").string() + " of " +
                     (dir / "data" / "a.png").string()),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("has no alpha channel"), std::string::npos) << e;
    fs::remove(dir / "inpaint" / "a.png");
    e = dataset_error(cfg);
    EXPECT_NE(e.find("has no inpaint image in inpaint_path"), std::string::npos) << e;
}

}  // namespace
}  // namespace loom::data
