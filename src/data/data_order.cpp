#include "loom/data/data_order.h"

#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/core/sha256.h"

namespace loom::data {

std::string cursor_to_json(const DataCursor& cursor) {
    nlohmann::json j;
    j["epoch"] = cursor.epoch;
    j["position"] = cursor.position;
    j["seed"] = cursor.seed;
    j["fingerprint"] = cursor.fingerprint;
    return j.dump();
}

DataCursor cursor_from_json(std::string_view text) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(std::string("data cursor is not valid JSON: ") + e.what());
    }
    if (!j.is_object()) throw Error("data cursor must be a JSON object, got: " + j.dump());
    auto number = [&](const char* key) -> std::uint64_t {
        if (!j.contains(key) || !j[key].is_number_unsigned())
            throw Error(std::string("data cursor needs a non-negative integer \"") + key +
                        "\", got: " + j.dump());
        return j[key].get<std::uint64_t>();
    };
    DataCursor c;
    c.epoch = number("epoch");
    c.position = number("position");
    c.seed = number("seed");
    if (!j.contains("fingerprint") || !j["fingerprint"].is_string())
        throw Error("data cursor needs a string \"fingerprint\", got: " + j.dump());
    c.fingerprint = j["fingerprint"].get<std::string>();
    return c;
}

Rng Batch::slot_rng(std::uint64_t seed, std::size_t slot) const {
    return Rng(mix_seed(seed, mix_seed(epoch, index), slot));
}

std::string plan_fingerprint(const BucketPlan& plan, int batch_size, std::uint64_t seed) {
    std::string text =
        "loom-data-order-v1|" + std::to_string(batch_size) + "|" + std::to_string(seed) + "|";
    for (const BucketSize& b : plan.item_bucket) text += b.key() + ",";
    return sha256_hex(text).substr(0, 16);
}

DataOrder::DataOrder(BucketPlan plan, int batch_size, std::uint64_t seed)
    : plan_(std::move(plan)), batch_size_(batch_size), seed_(seed) {
    if (plan_.item_count() == 0) throw Error("the data order needs at least one item");
    if (batch_size_ < 1)
        throw Error("batch size must be at least 1, got " + std::to_string(batch_size_));
    cursor_.seed = seed_;
    cursor_.fingerprint = plan_fingerprint(plan_, batch_size_, seed_);
    build_epoch();
}

std::vector<Batch> DataOrder::epoch_batches(std::uint64_t epoch) const {
    Rng rng(mix_seed(seed_, epoch));
    std::vector<Batch> batches;
    for (const Bucket& bucket : plan_.buckets) {
        std::vector<std::size_t> items = bucket.items;
        shuffle(items, rng);
        for (std::vector<std::size_t>& b : make_batches(items, batch_size_)) {
            Batch batch;
            batch.bucket = bucket.size;
            batch.items = std::move(b);
            batch.epoch = epoch;
            batches.push_back(std::move(batch));
        }
    }
    shuffle(batches, rng);
    for (std::size_t i = 0; i < batches.size(); ++i) batches[i].index = i;
    return batches;
}

void DataOrder::build_epoch() {
    epoch_batches_ = epoch_batches(cursor_.epoch);
}

Batch DataOrder::next_batch() {
    if (cursor_.position >= epoch_batches_.size()) {
        ++cursor_.epoch;
        cursor_.position = 0;
        build_epoch();
    }
    return epoch_batches_[std::size_t(cursor_.position++)];
}

bool DataOrder::restore(const DataCursor& cursor) {
    const bool same = cursor.seed == seed_ && cursor.fingerprint == cursor_.fingerprint;
    cursor_.epoch = cursor.epoch;
    cursor_.position = same ? cursor.position : 0;
    build_epoch();
    if (!same) {
        logger("data").warn(
            "the dataset, its buckets, the batch size or the seed changed since the data cursor "
            "was saved; epoch {} starts again from its first batch instead of batch {}",
            cursor.epoch, cursor.position);
    }
    return same;
}

void DataOrder::replace_plan(BucketPlan plan) {
    if (plan.item_count() == 0) throw Error("the data order needs at least one item");
    plan_ = std::move(plan);
    cursor_.fingerprint = plan_fingerprint(plan_, batch_size_, seed_);
    build_epoch();
}

}  // namespace loom::data
