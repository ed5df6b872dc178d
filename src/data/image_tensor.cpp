#include "loom/data/image_tensor.h"

#include <ATen/ATen.h>

#include <cstring>

#include "loom/data/dataset.h"
#include "loom/device/host_memory.h"

namespace loom::data {

at::Tensor image_to_tensor(const Image& image) {
    TORCH_CHECK(!image.empty(), "image_to_tensor: the image is empty");
    HostAllocations host;
    at::Tensor bytes = at::empty({image.height, image.width, 3}, at::kByte);
    std::memcpy(bytes.data_ptr(), image.pixels.data(), image.pixels.size());
    // [H, W, 3] bytes -> [3, H, W] in [-1, 1]
    return bytes.permute({2, 0, 1}).to(at::kFloat).div_(127.5).sub_(1.0).contiguous();
}

at::Tensor rgb8_tensor(const Image& image) {
    HostAllocations host;
    return at::from_blob(const_cast<std::uint8_t*>(image.pixels.data()),
                         {image.height, image.width, 3}, at::kByte)
        .clone();
}

Image tensor_to_image(const at::Tensor& tensor) {
    at::Tensor t = tensor.detach();
    if (t.dim() == 4 && t.size(0) == 1) t = t.squeeze(0);
    TORCH_CHECK(t.dim() == 3 && t.size(0) == 3,
                "tensor_to_image expects [3, H, W] or [1, 3, H, W], got ", t.sizes());
    TORCH_CHECK(at::isFloatingType(t.scalar_type()),
                "tensor_to_image expects a floating-point tensor, got ", t.scalar_type());
    HostAllocations host;
    const at::Tensor bytes = t.to(at::kCPU, at::kFloat)
                                 .clamp(-1.0, 1.0)
                                 .add(1.0)
                                 .mul(127.5)
                                 .round()
                                 .to(at::kByte)
                                 .permute({1, 2, 0})
                                 .contiguous();
    Image out(int(t.size(2)), int(t.size(1)));
    std::memcpy(out.pixels.data(), bytes.data_ptr(), out.pixels.size());
    return out;
}

at::Tensor fitted_tensor(const Image& image, BucketSize bucket, bool flip_x, bool flip_y) {
    const Image fitted = fit_to_bucket(image, plan_crop(image.width, image.height, bucket));
    return image_to_tensor(flip_image(fitted, flip_x, flip_y));
}

at::Tensor read_fitted_image(const std::filesystem::path& path, BucketSize size) {
    return fitted_tensor(read_image(path), size, false, false);
}

at::Tensor fitted_clip_tensor(const std::vector<Image>& frames, BucketSize bucket, bool flip_x,
                              bool flip_y) {
    TORCH_CHECK(!frames.empty(), "fitted_clip_tensor: a clip needs at least one frame");
    if (frames.size() == 1) return fitted_tensor(frames.front(), bucket, flip_x, flip_y);
    std::vector<at::Tensor> fitted;
    fitted.reserve(frames.size());
    for (const Image& f : frames) fitted.push_back(fitted_tensor(f, bucket, flip_x, flip_y));
    HostAllocations host;
    return at::stack(fitted, 1);  // [3, F, H, W]
}

at::Tensor load_item_tensor(const ImageRecord& image, BucketSize bucket, bool flip_x, bool flip_y,
                            const std::vector<std::int64_t>& frame_indices) {
    if (image.is_clip()) {
        return fitted_clip_tensor(read_video_frames(image.path, frame_indices), bucket, flip_x,
                                  flip_y);
    }
    return fitted_tensor(read_image(image.path), bucket, flip_x, flip_y);
}

}  // namespace loom::data
