// CUDA graph capture and replay for StepGraphs (loom/device/step_graphs.h). Compiles and links
// against the CUDA-enabled LibTorch everywhere; runs only on a GPU (perf.cuda_graphs).

#include "cuda_step_graphs.h"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <map>

#include "loom/core/logging.h"
#include "loom/device/device.h"

namespace loom {

namespace {

const Logger& log() {
    static const Logger l = logger("device");
    return l;
}

// What a capture may need beyond the warm-up's own peak (the pool rounds blocks up).
constexpr double kCaptureHeadroom = 1.25;

class CudaStepGraphs final : public StepGraphs {
  public:
    explicit CudaStepGraphs(Device& device)
        : device_(device),
          index_(static_cast<c10::DeviceIndex>(device.spec().index)),
          // Captures need a stream other than the default one; the warm-ups run there too, so
          // whatever the libraries set up per stream (cuBLAS workspaces) exists before a capture.
          stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index_)) {}

    ~CudaStepGraphs() override { clear(); }

    void run(const std::string& key, const std::function<void()>& work) override {
        Entry& e = entries_[key];
        const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(index_);
        at::cuda::CUDAEvent ready;
        ready.record(caller);
        ready.block(stream_);  // the inputs the caller just wrote are visible on stream_
        {
            c10::cuda::CUDAStreamGuard on_stream(stream_);
            if (e.graph) {
                e.graph->replay();
            } else if (e.runs == 0 || e.eager_only || !room_for(e)) {
                warm_up(e, work);
            } else {
                capture(key, e, work);
            }
        }
        at::cuda::CUDAEvent done;
        done.record(stream_);
        done.block(caller);  // the caller reads the outputs after the work
    }

    void clear() override {
        if (entries_.empty()) return;
        device_.synchronize();  // no replay may still be running on the pools being freed
        entries_.clear();
    }

    bool captures() const override { return true; }

    std::size_t captured() const override {
        std::size_t n = 0;
        for (const auto& [key, e] : entries_) n += e.graph ? 1 : 0;
        return n;
    }

  private:
    struct Entry {
        int runs = 0;
        bool eager_only = false;  // a capture of this key failed: eager until clear()
        std::uint64_t need = 0;   // the warm-up's peak above what was allocated before it
        std::unique_ptr<at::cuda::CUDAGraph> graph;
    };

    void warm_up(Entry& e, const std::function<void()>& work) {
        const std::uint64_t before = device_.stats().allocated;
        work();
        const MemoryStats after = device_.stats();
        e.need = after.peak_allocated > before ? after.peak_allocated - before : 0;
        ++e.runs;
    }

    bool room_for(const Entry& e) const {
        return static_cast<double>(device_.stats().free) >=
               kCaptureHeadroom * static_cast<double>(e.need);
    }

    void capture(const std::string& key, Entry& e, const std::function<void()>& work) {
        auto graph = std::make_unique<at::cuda::CUDAGraph>();
        try {
            graph->capture_begin();
            work();
            graph->capture_end();
        } catch (const std::exception& failed) {
            // End the capture so the allocator stops routing allocations to its pool; the
            // partial graph goes with `graph`. Nothing of `work` ran (a capture only records).
            try {
                graph->capture_end();
            } catch (const std::exception&) {
            }
            graph.reset();
            device_.empty_cache();
            e.eager_only = true;
            log().warn("CUDA graph capture of {} failed ({}); it runs eagerly from now on", key,
                       std::string(failed.what()).substr(0, 200));
            warm_up(e, work);  // the same work, eagerly: an OOM here is an ordinary one
            return;
        }
        graph->replay();
        e.graph = std::move(graph);
        ++e.runs;
        log().info("captured {} as a CUDA graph ({} captured)", key, captured());
    }

    Device& device_;
    c10::DeviceIndex index_;
    c10::cuda::CUDAStream stream_;
    std::map<std::string, Entry> entries_;
};

}  // namespace

std::unique_ptr<StepGraphs> make_cuda_step_graphs(Device& device) {
    return std::make_unique<CudaStepGraphs>(device);
}

}  // namespace loom
