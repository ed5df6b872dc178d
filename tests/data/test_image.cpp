// Image decoding/encoding, the pixel operations and the tensor conversion.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "data_test_util.h"
#include "loom/core/error.h"
#include "loom/data/image.h"
#include "loom/data/image_tensor.h"

namespace loom::data {
namespace {

using test::pattern_image;
using test::solid_image;

std::string format_error(std::string_view bytes) {
    try {
        decode_image(bytes, "x.img");
    } catch (const FormatError& e) {
        EXPECT_EQ(e.path(), "x.img");
        return e.what();
    }
    return "no error";
}

double mean_abs_diff(const Image& a, const Image& b) {
    EXPECT_EQ(a.pixels.size(), b.pixels.size());
    double sum = 0;
    for (std::size_t i = 0; i < a.pixels.size(); ++i)
        sum += std::abs(int(a.pixels[i]) - int(b.pixels[i]));
    return sum / double(a.pixels.size());
}

TEST(ImageCodec, PngRoundTripIsExact) {
    const Image im = pattern_image(7, 5, 3);
    const std::string png = encode_png(im);
    EXPECT_EQ(sniff_image_format(png), ImageFormat::kPng);
    const Image back = decode_image(png, "p.png");
    EXPECT_EQ(back.width, 7);
    EXPECT_EQ(back.height, 5);
    EXPECT_EQ(back.pixels, im.pixels);
}

TEST(ImageCodec, GreyAndAlphaPngsBecomeRgbWithAlphaDropped) {
    // grey: value v -> (v, v, v)
    const Image grey = decode_image(test::png_with_channels(2, 1, 1, {10, 200}), "g.png");
    EXPECT_EQ(grey.pixels, (std::vector<std::uint8_t>{10, 10, 10, 200, 200, 200}));
    // RGBA: alpha is dropped, not composited (PIL's convert('RGB'))
    const Image rgba =
        decode_image(test::png_with_channels(2, 1, 4, {1, 2, 3, 0, 4, 5, 6, 128}), "a.png");
    EXPECT_EQ(rgba.pixels, (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));
}

TEST(ImageCodec, JpegDecodesCloseToTheOriginal) {
    const Image im = solid_image(32, 16, 200, 40, 90);
    const std::string jpeg = encode_jpeg(im, 95);
    EXPECT_EQ(sniff_image_format(jpeg), ImageFormat::kJpeg);
    const Image back = decode_image(jpeg, "j.jpg");
    ASSERT_EQ(back.width, 32);
    ASSERT_EQ(back.height, 16);
    EXPECT_LT(mean_abs_diff(im, back), 3.0);
}

TEST(ImageCodec, WebpLosslessRoundTripOrAClearUnsupportedMessage) {
    const Image im = pattern_image(9, 4);
    if (!webp_supported()) {
        EXPECT_THROW(encode_webp(im), Error);
        const std::string riff = std::string("RIFF\x04\0\0\0WEBP", 12);
        EXPECT_EQ(format_error(riff),
                  "x.img: it is a WebP image and this loom was built without libwebp; convert it "
                  "to PNG or JPEG, or install libwebp-dev and rebuild loom");
        return;
    }
    const std::string webp = encode_webp(im);
    EXPECT_EQ(sniff_image_format(webp), ImageFormat::kWebp);
    const Image back = decode_image(webp, "w.webp");
    EXPECT_EQ(back.width, 9);
    EXPECT_EQ(back.pixels, im.pixels);
    EXPECT_EQ(format_error(webp.substr(0, webp.size() - 5)),
              "x.img: the WebP image is truncated (it ends inside its data); re-export the image "
              "or remove it from the dataset");
}

TEST(ImageCodec, TruncatedPngIsReportedAsTruncated) {
    const std::string png = encode_png(pattern_image(40, 30));
    EXPECT_EQ(format_error(png.substr(0, png.size() / 2)),
              "x.img: the PNG image is truncated (it ends inside a chunk); re-export the image or "
              "remove it from the dataset");
    // Exactly the IEND chunk (12 bytes) missing.
    EXPECT_EQ(format_error(png.substr(0, png.size() - 12)),
              "x.img: the PNG image is truncated (it ends before its IEND chunk); re-export the "
              "image or remove it from the dataset");
}

TEST(ImageCodec, TruncatedJpegIsReportedAsTruncated) {
    // stb_image would decode a cut-off JPEG without complaint (grey fill); loom must not.
    const std::string jpeg = encode_jpeg(pattern_image(64, 64), 90);
    EXPECT_EQ(format_error(jpeg.substr(0, jpeg.size() * 2 / 3)),
              "x.img: the JPEG image is truncated (its end-of-image marker is missing); re-export "
              "the image or remove it from the dataset");
    EXPECT_EQ(format_error(jpeg.substr(0, 10)),
              "x.img: the JPEG image is truncated (it ends inside a header); re-export the image "
              "or remove it from the dataset");
}

TEST(ImageCodec, CorruptPngDataNamesTheDecoderError) {
    std::string png = encode_png(pattern_image(40, 30));
    // Scramble the compressed bytes of the IDAT chunk (structure stays intact).
    const std::size_t idat = png.find("IDAT");
    ASSERT_NE(idat, std::string::npos);
    for (std::size_t i = idat + 6; i < idat + 40; ++i) png[i] = char(0xA5 ^ i);
    const std::string message = format_error(png);
    EXPECT_EQ(message.rfind("x.img: the PNG image is corrupt (stb_image: ", 0), 0u) << message;
    EXPECT_NE(message.find("); re-export the image or remove it from the dataset"),
              std::string::npos)
        << message;
}

TEST(ImageCodec, OtherFormatsAreRejectedWithWhatToDo) {
    EXPECT_EQ(format_error("GIF89a\x01\0\x01\0\0\0\0"),
              "x.img: it is a GIF image, which loom does not read; convert it to PNG, JPEG or "
              "WebP");
    EXPECT_EQ(format_error("BM\x3a\0\0\0\0\0\0\0"),
              "x.img: it is a BMP image, which loom does not read; convert it to PNG, JPEG or "
              "WebP");
    EXPECT_EQ(format_error("just some text"),
              "x.img: it is not a PNG, JPEG or WebP image (unrecognised content); convert it to "
              "one of those or remove it from the dataset");
    EXPECT_EQ(format_error(""),
              "x.img: the file is empty (0 bytes); re-export the image or remove it from the "
              "dataset");
}

TEST(ImageCodec, ReadImageReportsAMissingFileAsIoError) {
    test::TempDir dir;
    try {
        read_image(dir / "nope.png");
        FAIL() << "no error";
    } catch (const IoError& e) {
        EXPECT_EQ(std::string(e.what()), (dir / "nope.png").string() +
                                             ": cannot open the image: No such file or directory");
    }
}

TEST(ImageCodec, WritePngWritesAReadableFile) {
    test::TempDir dir;
    const Image im = pattern_image(5, 6);
    write_png(dir / "s.png", im);
    EXPECT_EQ(read_image(dir / "s.png").pixels, im.pixels);
}

TEST(ImageOps, CropAndFlipsMovePixelsExactly) {
    const Image im = pattern_image(4, 3);
    const Image c = crop_image(im, 1, 1, 2, 2);
    ASSERT_EQ(c.width, 2);
    EXPECT_EQ(std::vector<std::uint8_t>(c.at(0, 0), c.at(0, 0) + 3),
              std::vector<std::uint8_t>(im.at(1, 1), im.at(1, 1) + 3));
    EXPECT_EQ(std::vector<std::uint8_t>(c.at(1, 1), c.at(1, 1) + 3),
              std::vector<std::uint8_t>(im.at(2, 2), im.at(2, 2) + 3));
    EXPECT_THROW(crop_image(im, 3, 0, 2, 1), Error);

    const Image fx = flip_image(im, true, false);
    const Image fy = flip_image(im, false, true);
    const Image fxy = flip_image(im, true, true);
    for (int y = 0; y < 3; ++y) {
        for (int x = 0; x < 4; ++x) {
            EXPECT_EQ(fx.at(x, y)[0], im.at(3 - x, y)[0]);
            EXPECT_EQ(fy.at(x, y)[1], im.at(x, 2 - y)[1]);
            EXPECT_EQ(fxy.at(x, y)[2], im.at(3 - x, 2 - y)[2]);
        }
    }
}

// A 3x2 image with pixel values 1..6 (R channel), row by row:  1 2 3 / 4 5 6.
Image numbered() {
    Image im(3, 2);
    for (int i = 0; i < 6; ++i) im.pixels[std::size_t(i) * 3] = std::uint8_t(i + 1);
    return im;
}

std::vector<int> reds(const Image& im) {
    std::vector<int> out;
    for (int y = 0; y < im.height; ++y)
        for (int x = 0; x < im.width; ++x) out.push_back(im.at(x, y)[0]);
    return out;
}

TEST(ImageOps, ExifOrientationsMatchPilsExifTranspose) {
    const Image im = numbered();  // 1 2 3 / 4 5 6
    EXPECT_EQ(reds(apply_exif_orientation(im, 1)), (std::vector<int>{1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(reds(apply_exif_orientation(im, 2)), (std::vector<int>{3, 2, 1, 6, 5, 4}));
    EXPECT_EQ(reds(apply_exif_orientation(im, 3)), (std::vector<int>{6, 5, 4, 3, 2, 1}));
    EXPECT_EQ(reds(apply_exif_orientation(im, 4)), (std::vector<int>{4, 5, 6, 1, 2, 3}));
    // 2x3 results
    EXPECT_EQ(reds(apply_exif_orientation(im, 5)), (std::vector<int>{1, 4, 2, 5, 3, 6}));
    EXPECT_EQ(reds(apply_exif_orientation(im, 6)), (std::vector<int>{4, 1, 5, 2, 6, 3}));
    EXPECT_EQ(reds(apply_exif_orientation(im, 7)), (std::vector<int>{6, 3, 5, 2, 4, 1}));
    EXPECT_EQ(reds(apply_exif_orientation(im, 8)), (std::vector<int>{3, 6, 2, 5, 1, 4}));
    EXPECT_EQ(apply_exif_orientation(im, 6).width, 2);
    EXPECT_EQ(reds(apply_exif_orientation(im, 9)), reds(im));
}

TEST(ImageCodec, JpegExifOrientationIsAppliedOnDecode) {
    // Left half red, right half blue, 32x16. Orientation 6 (rotate 90° clockwise): 16x32 with
    // red on top.
    Image im = solid_image(32, 16, 255, 0, 0);
    for (int y = 0; y < 16; ++y)
        for (int x = 16; x < 32; ++x) im.at(x, y)[0] = 0, im.at(x, y)[2] = 255;
    for (bool little : {true, false}) {
        const std::string jpeg = test::jpeg_with_orientation(im, 6, little);
        EXPECT_EQ(jpeg_exif_orientation(jpeg), 6);
        const Image up = decode_image(jpeg, "r.jpg");
        ASSERT_EQ(up.width, 16);
        ASSERT_EQ(up.height, 32);
        EXPECT_GT(up.at(8, 4)[0], 200);  // top: red
        EXPECT_LT(up.at(8, 4)[2], 60);
        EXPECT_GT(up.at(8, 28)[2], 200);  // bottom: blue
    }
    EXPECT_EQ(jpeg_exif_orientation(encode_jpeg(im)), 1);
}

TEST(ImageOps, ResizeIsAreaCorrect) {
    // Stripes one pixel on, three off, shrunk 4x: each output pixel covers one whole period, so
    // an area-correct filter gives about the mean, 255/4; point or plain bilinear sampling
    // (which reads pixels 1 and 2 of each period) would give 0 or 255.
    Image stripes(32, 8);
    for (int y = 0; y < 8; ++y)
        for (int x = 0; x < 32; ++x)
            std::fill(stripes.at(x, y), stripes.at(x, y) + 3, x % 4 == 0 ? 255 : 0);
    const Image quarter = resize_image(stripes, 8, 2);
    for (int x = 1; x < 7; ++x) EXPECT_NEAR(int(quarter.at(x, 1)[0]), 64, 6) << x;

    const Image flat = resize_image(solid_image(37, 23, 10, 20, 30), 11, 7);
    ASSERT_EQ(flat.width, 11);
    ASSERT_EQ(flat.height, 7);
    for (int y = 0; y < 7; ++y) {
        for (int x = 0; x < 11; ++x) {
            EXPECT_EQ(flat.at(x, y)[0], 10);
            EXPECT_EQ(flat.at(x, y)[2], 30);
        }
    }
    EXPECT_THROW(resize_image(flat, 0, 3), Error);
}

TEST(ImageOps, FitToBucketScalesThenCropsTheCentre) {
    // 100x50, left 40 columns red, middle 20 green, right 40 blue, into 64x48: scale 0.96 to
    // 96x48, crop x 16..80: the centre (green) stays centred, edges are cut.
    Image im = solid_image(100, 50, 255, 0, 0);
    for (int y = 0; y < 50; ++y) {
        for (int x = 40; x < 100; ++x) {
            std::uint8_t* p = im.at(x, y);
            p[0] = 0;
            (x < 60 ? p[1] : p[2]) = 255;
        }
    }
    const CropPlan plan = plan_crop(100, 50, {64, 48});
    EXPECT_EQ(plan.scale_width, 96);
    EXPECT_EQ(plan.scale_height, 48);
    EXPECT_EQ(plan.crop_x, 16);
    EXPECT_EQ(plan.crop_y, 0);
    const Image fitted = fit_to_bucket(im, plan);
    ASSERT_EQ(fitted.width, 64);
    ASSERT_EQ(fitted.height, 48);
    EXPECT_GT(fitted.at(32, 24)[1], 200);  // green centre
    EXPECT_GT(fitted.at(2, 24)[0], 200);   // red left edge
    EXPECT_GT(fitted.at(61, 24)[2], 200);  // blue right edge
}

TEST(ImageOps, GridPlacesImagesRowByRow) {
    const std::vector<Image> images = {solid_image(3, 2, 1, 1, 1), solid_image(2, 2, 2, 2, 2),
                                       solid_image(1, 1, 3, 3, 3)};
    const Image grid = image_grid(images, 2, 1);
    ASSERT_EQ(grid.width, 3 + 1 + 3);   // two 3-wide cells, 1 padding
    ASSERT_EQ(grid.height, 2 + 1 + 2);  // two rows of 2
    EXPECT_EQ(grid.at(0, 0)[0], 1);
    EXPECT_EQ(grid.at(2, 1)[0], 1);
    EXPECT_EQ(grid.at(3, 0)[0], 0);  // padding
    EXPECT_EQ(grid.at(4, 0)[0], 2);
    EXPECT_EQ(grid.at(6, 0)[0], 0);  // cell wider than the 2-wide image
    EXPECT_EQ(grid.at(0, 3)[0], 3);
    EXPECT_EQ(grid.at(1, 3)[0], 0);
    EXPECT_EQ(image_grid(images).width, 3 + 3);  // default: ceil(sqrt(3)) = 2 columns
    EXPECT_TRUE(image_grid({}).empty());
}

TEST(ImageTensor, BytesMapToMinusOneToOneInChwOrder) {
    Image im(2, 1);
    im.pixels = {0, 255, 51, 102, 153, 204};
    const at::Tensor t = image_to_tensor(im);
    ASSERT_EQ(t.sizes(), (at::IntArrayRef{3, 1, 2}));
    EXPECT_EQ(t.scalar_type(), at::kFloat);
    EXPECT_FLOAT_EQ(t[0][0][0].item<float>(), -1.0f);
    EXPECT_FLOAT_EQ(t[1][0][0].item<float>(), 1.0f);
    EXPECT_FLOAT_EQ(t[2][0][0].item<float>(), 51 / 127.5f - 1);
    EXPECT_FLOAT_EQ(t[0][0][1].item<float>(), 102 / 127.5f - 1);
    EXPECT_EQ(tensor_to_image(t).pixels, im.pixels);
    EXPECT_EQ(tensor_to_image(t.unsqueeze(0) * 3).pixels,  // [1, 3, H, W], clamped
              (std::vector<std::uint8_t>{0, 255, 0, 51, 204, 255}));
    EXPECT_THROW(tensor_to_image(torch::zeros({4, 2, 2})), c10::Error);
}

TEST(ImageTensor, LoadItemTensorFitsAndFlips) {
    test::TempDir dir;
    const Image im = pattern_image(20, 10);
    write_png(dir / "a.png", im);
    ImageRecord record;
    record.path = dir / "a.png";
    record.width = 20;
    record.height = 10;
    const at::Tensor t = load_item_tensor(record, {20, 10}, false, false);
    EXPECT_EQ(tensor_to_image(t).pixels, im.pixels);
    const at::Tensor f = load_item_tensor(record, {20, 10}, true, false);
    EXPECT_TRUE(torch::equal(f, t.flip({2})));
    EXPECT_EQ(load_item_tensor(record, {16, 8}, false, false).sizes(), (at::IntArrayRef{3, 8, 16}));
}

}  // namespace
}  // namespace loom::data
