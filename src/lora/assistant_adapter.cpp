#include "loom/lora/assistant_adapter.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/lora/lora_file.h"
#include "loom/model/loading/model_location.h"

namespace loom {

namespace {

// Two adapters on one layer: the layer's own (the trained LoRA, or none) and the assistant's.
class BesideAdapter final : public LayerAdapter {
  public:
    BesideAdapter(std::shared_ptr<LayerAdapter> own, std::shared_ptr<LayerAdapter> assistant)
        : own_(std::move(own)), assistant_(std::move(assistant)) {}
    at::Tensor forward(const at::Tensor& input) override {
        const at::Tensor a = assistant_->forward(input);
        return own_ ? own_->forward(input) + a : a;
    }
    at::Tensor add_to(const at::Tensor& output, const at::Tensor& input) override {
        return assistant_->add_to(own_ ? own_->add_to(output, input) : output, input);
    }

  private:
    std::shared_ptr<LayerAdapter> own_;
    std::shared_ptr<LayerAdapter> assistant_;
};

std::shared_ptr<LayerAdapter> adapter_of(const LoRATarget& t) {
    if (auto* linear = dynamic_cast<LinearImpl*>(t.base.get())) return linear->adapter();
    return dynamic_cast<Conv2dImpl*>(t.base.get())->adapter();
}

void set_adapter(const LoRATarget& t, std::shared_ptr<LayerAdapter> adapter) {
    if (auto* linear = dynamic_cast<LinearImpl*>(t.base.get())) {
        linear->set_adapter(std::move(adapter));
    } else {
        dynamic_cast<Conv2dImpl*>(t.base.get())->set_adapter(std::move(adapter));
    }
}

// The one .safetensors file of `folder`.
std::filesystem::path only_safetensors(const std::filesystem::path& folder,
                                       const std::string& given) {
    std::vector<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
        if (entry.path().extension() == ".safetensors") found.push_back(entry.path());
    }
    if (found.size() != 1) {
        throw IoError(folder.string(), "holds " + std::to_string(found.size()) +
                                           " .safetensors files; model.assistant_lora_path '" +
                                           given + "' must name one (give the file's path)");
    }
    return found.front();
}

}  // namespace

std::filesystem::path locate_assistant_lora(const std::string& given) {
    std::error_code ec;
    const std::filesystem::path as_given(given);
    if (std::filesystem::is_regular_file(as_given, ec)) return as_given;
    if (std::filesystem::is_directory(as_given, ec)) return only_safetensors(as_given, given);
    // "<org>/<name>/<file>": the file in the hub cache's snapshot of <org>/<name>.
    const std::size_t first = given.find('/');
    const std::size_t second = first == std::string::npos ? first : given.find('/', first + 1);
    if (second != std::string::npos && is_hub_id(given.substr(0, second))) {
        const std::filesystem::path file =
            locate_model(given.substr(0, second)) / given.substr(second + 1);
        if (!std::filesystem::is_regular_file(file, ec)) {
            throw IoError(file.string(), "not found (model.assistant_lora_path '" + given +
                                             "'): the hub snapshot has no such file");
        }
        return file;
    }
    return only_safetensors(locate_model(given), given);
}

AssistantAdapter::AssistantAdapter(torch::nn::Module& denoiser, const std::filesystem::path& path,
                                   const LoRAModel& model)
    : path_(path), network_(load_lora_network(denoiser, path, model)) {
    network_.merge();
    // Taken out again for previews: the same LoRA at -1 beside the trained one.
    network_.set_multiplier(-1.0);
}

AssistantAdapter::Removed::Removed(AssistantAdapter* assistant, const at::Device& device)
    : assistant_(assistant) {
    if (!assistant_) return;
    for (const LoRATarget& t : assistant_->network_.targets()) {
        LoRAAdapter& a = *t.adapter;
        if (a.down.device() != device) {
            a.down = a.down.to(device);
            a.up = a.up.to(device);
        }
        saved_.push_back(adapter_of(t));
        set_adapter(t, std::make_shared<BesideAdapter>(saved_.back(), t.adapter));
    }
}

AssistantAdapter::Removed::~Removed() {
    if (!assistant_) return;
    const auto& targets = assistant_->network_.targets();
    for (std::size_t i = 0; i < saved_.size(); ++i) set_adapter(targets[i], saved_[i]);
}

}  // namespace loom
