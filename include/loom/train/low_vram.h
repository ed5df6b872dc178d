#pragma once

// low_vram: the ladder's last rung, and `model.low_vram: true` from the start. Three sub-modes,
// each a level the ladder turns on in order (level N includes the levels below it):
//
//   1. encoders on the host: the text encoder(s) and the VAE live in host memory once latents
//      and text embeddings are cached; they come to the device only for sampling, for the cache
//      phase and for a cache miss, and go back after.
//   2. quantized base: the frozen weights of the denoiser's Linear and Conv2d layers are held in
//      8 or 4 bits (model/nn/quantized_weight.h: the job's model.qtype, qfloat8 by default; the
//      text encoders' too with model.quantize_te and qtype_te) and dequantized to bf16 for each
//      computation; every other frozen float32 tensor is held in bf16. The LoRA weights and the
//      optimizer state stay float32. ai-toolkit's `model.quantize: true` starts here. A quantized
//      layer keeps its codes and scales as buffers (they move with it) and a one-element
//      placeholder of its weight's shape as the parameter, which placement leaves where it is.
//   3. block streaming: the frozen Linear/Conv2d weights of some or all of the denoiser's blocks
//      (the UNet's down, mid and up blocks; Flux's double- and single-stream blocks: the family
//      says which, ModelFamily::blocks) stay on the host; each layer fetches a device copy for its
//      forward (and again for its backward, and its recompute under gradient checkpointing),
//      which is released when the computation that used it is done. How many blocks stream is
//      the plan's count (guard::Plan::streamed_blocks; 0: every block), taken in the streaming
//      order: the largest blocks first, the last first among equal ones (stream_order()); the
//      others stay resident, quantized as level 2 left them. On CUDA the host copies are pinned, so
//      the fetches are plain DMA. By default a layer's copy is made on the compute stream when the
//      layer runs; with perf.stream_prefetch the copies of the next layers run ahead on a side
//      stream (train/prefetching_weight_source.h), at the cost of up to
//      PrefetchingWeightSource::kDepth layers' copies more device memory.
//
// Beside the levels, for a denoiser of experts (Wan 2.2 14B), the idle expert on the host: a step
// computes with one expert, so the frozen weights of the others wait in host memory and an
// expert comes to the device when the model asks for it (ModelFamily's expert placement: its
// turn in training, its timesteps in a preview), the one it replaces leaving first so the device
// never holds both. The LoRA weights and their optimizer state stay on the device. It composes
// with every level: a parked expert is quantized where it lies, its streamed block weights stay
// streamed, and leaving level 3 or 2 puts its weights back on the host, not the device. The
// ladder's first free rung (guard::Plan::idle_expert_on_host); ai-toolkit's low_vram does it by
// hand.
//
// Levels go back down only for the guard's measured choice (issue 22), which tries a higher
// level as one candidate among others and must be able to leave it: level 3 returns to 2 (the
// streamed weights back on the device), 1 to 0 (the encoders back), and from 2 or 3 to below 2
// only while keep_originals(true) kept the float32 base weights on the host (bf16 cannot become
// float32 again otherwise). Scale-up leaves low_vram alone.
//
// Placement also applies perf.channels_last: the denoiser's and the VAE's conv weights are
// converted on the host before anything is placed, and every later copy (bf16, streaming, fetches)
// keeps the layout (model/nn/memory_format.h).

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "loom/device/device.h"
#include "loom/model/family.h"
#include "loom/model/nn/quantized_weight.h"
#include "loom/train/prefetching_weight_source.h"

namespace loom {

// The perf switches placement applies (config::PerfConfig), both off by default, and level 2's
// qtypes (config::ModelConfig's qtype, and qtype_te when quantize_te).
struct PlacementOptions {
    bool stream_prefetch = false;  // level 3 copies the next layers ahead
    bool channels_last = false;    // denoiser and VAE conv weights channels-last
    QType base_qtype = QType::kFloat8;
    std::optional<QType> encoder_qtype;  // nullopt: the text encoders in bf16, unquantized
    // Where level 2 keeps the codes it computed (a safetensors file named for the model's
    // fingerprint and the qtypes, beside the latent cache), so that a restart after an OOM or a
    // crash reads them instead of quantizing again; empty: not kept.
    std::filesystem::path quantized_cache;
};

class LowVramMode {
  public:
    static constexpr int kLevels = 3;

    LowVramMode(ModelFamily& model, Device& device, PlacementOptions options = {});
    ~LowVramMode();
    LowVramMode(const LowVramMode&) = delete;
    LowVramMode& operator=(const LowVramMode&) = delete;

    // Places a freshly loaded (host-resident) model on the device as `level` asks, at level 3 with
    // `streamed_blocks` of the streaming order streaming (0: every block).
    void place_model(int level, int streamed_blocks = 0);
    // Moves a placed model to `level` (and at level 3 to `streamed_blocks` streaming, more or
    // fewer): any level above; a lower one as the top of this file says (refused with loom::Error
    // otherwise).
    void set_level(int level, int streamed_blocks = 0);
    // The blocks streaming now (0 below level 3), and the denoiser's blocks in all.
    int streamed_blocks() const;
    int block_count() { return static_cast<int>(stream_order().size()); }
    // The denoiser's blocks as the ladder weighs them (guard::PolicyContext): each one's bytes on
    // the device in the streaming order — what streaming it frees, at level 2's sizes (quantized
    // in the job's qtype: their own once level 2 made them, computed from the weights' shapes
    // before) — and what streaming adds to a step however many blocks stream: (prefetch depth + 1)
    // copies of the largest fetch. Known before placement, so a load that fails counts blocks.
    struct StreamFacts {
        std::vector<std::uint64_t> block_bytes;
        std::uint64_t overhead = 0;
    };
    StreamFacts stream_facts();
    // While on, raising to level 2 keeps each converted float32 weight on the host, so that
    // set_level can come back below 2 exactly; off drops what was kept (host RAM: the base
    // model's float32 size while on).
    void keep_originals(bool keep);
    int level() const { return level_; }
    // Turns the idle expert on the host on or off (a no-op for one denoiser); may be called
    // before place_model, which then never brings the idle experts to the device. Turning it on
    // keeps the expert that computed last (before any, the first that trains) on the device.
    void set_idle_expert_on_host(bool on);
    bool idle_expert_on_host() const { return idle_expert_on_host_; }

    // At level 3 the encoders also compute where they live, on the host, when caching latents
    // and text embeddings (and for a cache miss): a T5 too large to visit the device next to
    // the placed transformer still encodes. Previews bring them to the device as below.
    bool encode_on_host() const { return level_ >= 3; }

    // Releases the device copies block streaming made ahead of use (perf.stream_prefetch): what
    // a failed attempt held, after an OOM. A no-op without prefetch.
    void drop_prefetched();
    // What prefetch did so far; nullopt without it (below level 3, or the switch off).
    std::optional<PrefetchingWeightSource::Stats> prefetch_stats() const;

    // For its lifetime the text encoder(s) and the VAE are on the device (level >= 1; a no-op
    // below). Scopes nest: the outermost one moves them back.
    class EncodersOnDevice {
      public:
        explicit EncodersOnDevice(LowVramMode& mode);
        ~EncodersOnDevice();
        EncodersOnDevice(const EncodersOnDevice&) = delete;
        EncodersOnDevice& operator=(const EncodersOnDevice&) = delete;

      private:
        LowVramMode& mode_;
        bool active_;  // the mode was at level >= 1 when the scope began
    };

  private:
    void encoders_to(bool device);
    // Level 2: the frozen Linear/Conv2d weights quantized, the other frozen float32 tensors to
    // bf16; the denoiser is device-resident once placed.
    void reduce_base(bool denoiser_on_device);
    // `cached`: the codes read from the cache file by layer key, used when their layout fits;
    // `kept` collects every layer's codes. Returns whether the layer was quantized anew.
    bool quantize_layer(torch::nn::Module& layer, at::Tensor& weight, QType qtype, bool on_device,
                        const std::string& key, const std::map<std::string, at::Tensor>& cached,
                        std::vector<std::pair<std::string, at::Tensor>>& kept);
    std::map<std::string, at::Tensor> read_quantized_cache() const;
    void write_quantized_cache(const std::vector<std::pair<std::string, at::Tensor>>& kept) const;
    // Whether placement leaves `t` where it is: a streamed weight, a quantized layer's placeholder.
    bool stays(const at::Tensor& t) const;
    // Whether `t` is a frozen tensor of an expert waiting on the host.
    bool parked(const at::Tensor& t) const;
    // The model's expert placement: expert `index` (or every expert) to the device, the others
    // to the host while the idle expert is on the host.
    void place_expert(std::size_t index);
    // Expert `index`'s frozen tensors to the host (`on_host`) or the device, except those that
    // stay (streamed, placeholders); its LoRA weights stay on the device.
    void move_expert(std::size_t index, bool on_host);
    // parked_tensors_ for the experts parked now (after a move, or after a level made tensors).
    void collect_parked();
    // The source of a quantized layer, or nullptr.
    class QuantizedFetch* quantized_source(const torch::nn::Module* layer) const;
    // One of the denoiser's blocks and its Linear/Conv2d layers.
    struct StreamBlock {
        std::string name;  // "transformer_blocks.3.", "mid_block."
        std::vector<torch::nn::Module*> layers;
    };
    // The blocks in streaming order, found and ordered on first use by their bytes then.
    std::vector<StreamBlock>& stream_order();
    // The device bytes a block's layers hold: weights (or codes and scales) and biases.
    std::uint64_t block_bytes(const StreamBlock& block) const;
    // The first `count` blocks of the streaming order stream, the others are resident.
    void stream_first(std::size_t count);
    // The plan's count (0: every block).
    void set_streamed_blocks(int count);
    // Level 2 back to 1: the kept float32 weights replace the bf16 ones, where each one lives.
    void restore_originals();

    ModelFamily& model_;
    Device& device_;
    PlacementOptions options_;
    std::shared_ptr<PrefetchingWeightSource> prefetch_;  // level 3 with stream_prefetch
    std::shared_ptr<WeightSource> source_;  // what the streamed layers fetch through (level 3)
    int level_ = 0;
    bool placed_ = false;  // place_model is done
    int encoder_scopes_ = 0;
    // The idle expert on the host: which experts wait there, their frozen tensors, and the
    // expert that computed last.
    bool idle_expert_on_host_ = false;
    std::vector<bool> expert_parked_;
    std::unordered_set<const c10::TensorImpl*> parked_tensors_;
    std::optional<std::size_t> active_expert_;
    // The host-resident weights of level 3 (their TensorImpl: set_data keeps it), and the blocks
    // they belong to: the first streaming_ of stream_order_.
    std::unordered_set<const c10::TensorImpl*> streamed_;
    std::vector<StreamBlock> stream_order_;
    std::size_t streaming_ = 0;
    // The quantized layers (level 2), with the source that dequantizes their weights.
    struct QuantizedLayer {
        torch::nn::Module* module;
        std::shared_ptr<class QuantizedFetch> source;
    };
    std::vector<QuantizedLayer> quantized_;
    std::unordered_set<const c10::TensorImpl*> placeholders_;
    struct Original {
        at::Tensor param;  // shares the parameter's TensorImpl
        at::Tensor full;   // its float32 value, on the host
    };
    bool keep_originals_ = false;
    std::vector<Original> originals_;
};

}  // namespace loom
