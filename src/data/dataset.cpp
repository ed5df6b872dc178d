#include "loom/data/dataset.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "loom/config/job.h"
#include "loom/core/logging.h"
#include "loom/core/sha256.h"
#include "loom/core/text.h"
#include "loom/core/utf8.h"

namespace loom::data {

namespace fs = std::filesystem;

namespace {

constexpr const char* kImageKinds = ".jpg, .jpeg, .png or .webp";
constexpr const char* kClipKinds = ".jpg, .jpeg, .png, .webp, .mp4, .webm, .mov or .mkv";

std::string lower(std::string s) {
    for (char& c : s)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return s;
}

bool hidden(const fs::path& p) {
    const std::string name = p.filename().string();
    return !name.empty() && name[0] == '.';
}

// Reads a whole file; on failure returns false and the OS error text.
bool read_bytes(const fs::path& path, std::string& out, std::string& error) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
        error = std::strerror(errno);
        return false;
    }
    out.clear();
    char buffer[1 << 16];
    std::size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) out.append(buffer, n);
    const bool failed = std::ferror(f) != 0;
    const int err = errno;
    std::fclose(f);
    if (failed) {
        error = std::strerror(err);
        return false;
    }
    return true;
}

// One candidate file's outcome: a record, or the warning that skips it, or (a control image
// that cannot be paired) the error that stops the scan.
struct Outcome {
    std::optional<ImageRecord> record;
    std::string warning;
    std::string fatal;
};

// control_path's (or inpaint_path's) image files by stem (a stem with several files is refused
// when used).
using ControlFiles = std::map<std::string, std::vector<fs::path>>;

// What an image pairs with: its control (source) image, or its inpaint image (whose alpha is
// the mask), and the words its errors use.
struct PairKind {
    const char* key;   // "control_path"
    const char* noun;  // "control image"
    const char* add;   // what to add to the folder
    bool alpha;        // the pair must have an alpha channel
};
constexpr PairKind kControlPair{"control_path", "control image", "its source image", false};
constexpr PairKind kInpaintPair{"inpaint_path", "inpaint image",
                                "the image with its inpaint area transparent (PNG or WebP alpha)",
                                true};

// The message of a FormatError/IoError about `path`, without the path it starts with (the skip
// warning names the file once).
std::string without_path(const Error& e, const fs::path& path) {
    std::string why = e.what();
    const std::string prefix = path.string() + ": ";
    if (why.compare(0, prefix.size(), prefix) == 0) why = why.substr(prefix.size());
    return why;
}

// The control image paired with `image` (scan_dataset's header says how), as a record; the
// reason it cannot be in `error` otherwise.
std::shared_ptr<const ImageRecord> control_of(const fs::path& image, const ControlFiles& controls,
                                              const std::string& folder, std::string& error,
                                              const PairKind& kind = kControlPair) {
    const auto found = controls.find(image.stem().string());
    if (found == controls.end()) {
        error = image.string() + " has no " + kind.noun + " in " + kind.key + " " + folder +
                " (looked for " + image.stem().string() +
                " with .jpg, .jpeg, .png or .webp); add " + kind.add +
                " there, remove the image from the dataset, or drop datasets[]." + kind.key +
                " to train without pairs";
        return nullptr;
    }
    if (found->second.size() > 1) {
        error = image.string() + " has " + std::to_string(found->second.size()) + " " + kind.noun +
                "s in " + folder + " (" + found->second[0].string() + ", " +
                found->second[1].string() + "); keep one per stem";
        return nullptr;
    }
    const fs::path& path = found->second.front();
    auto record = std::make_shared<ImageRecord>();
    record->path = path;
    std::string bytes, why;
    if (!read_bytes(path, bytes, why)) {
        error = "cannot read " + std::string(kind.noun) + " " + path.string() + " of " +
                image.string() + " (" + why + "); check that it is readable";
        return nullptr;
    }
    try {
        if (bytes.empty()) throw FormatError(path.string(), "the file is empty (0 bytes)");
        const Image decoded =
            kind.alpha ? decode_alpha(bytes, path.string()) : decode_image(bytes, path.string());
        record->width = decoded.width;
        record->height = decoded.height;
        record->format = sniff_image_format(bytes);
    } catch (const Error& e) {
        error = std::string(kind.noun) + " " + path.string() + " of " + image.string() + ": " +
                without_path(e, path) + "; replace it with " +
                (kind.alpha ? "a PNG or WebP with an alpha channel"
                            : "a PNG, JPEG or WebP of the source");
        return nullptr;
    }
    record->content_hash = sha256_hex(bytes);
    return record;
}

Outcome examine(const fs::path& path, const config::DatasetConfig& cfg,
                const std::vector<ControlFiles>& controls, const ControlFiles* inpaints) {
    Outcome out;
    auto skip = [&](const std::string& why) {
        out.warning = "skipping " + path.string() + ": " + why;
        return out;
    };
    if (is_unsupported_image_name(path)) {
        return skip(lower(path.extension().string()) +
                    " images are not supported; convert it to PNG, JPEG or WebP");
    }
    const bool clip = is_video_name(path);
    std::string bytes, error;
    if (!read_bytes(path, bytes, error))
        return skip("cannot read the file (" + error + "); check that it exists and is readable");
    if (bytes.empty())
        return skip(std::string("the file is empty (0 bytes); re-export the ") +
                    (clip ? "clip" : "image") + " or remove it from the dataset");

    ImageRecord record;
    record.path = path;
    record.content_hash = sha256_hex(bytes);
    try {
        if (clip) {
            // Decoded whole once: a truncated clip or one without frames is found now.
            const VideoInfo info = probe_video(path);
            record.width = info.width;
            record.height = info.height;
            record.video = info;
        } else {
            const Image image = decode_image(bytes, path.string());
            record.width = image.width;
            record.height = image.height;
            record.format = sniff_image_format(bytes);
        }
    } catch (const FormatError& e) {
        return skip(without_path(e, path));
    } catch (const IoError& e) {
        return skip(without_path(e, path));
    }

    std::string ext = cfg.caption_ext.empty() ? ".txt" : cfg.caption_ext;
    if (ext[0] != '.') ext = "." + ext;
    fs::path caption_path = path.parent_path() / (path.stem().string() + ext);
    std::error_code ec;
    if (fs::is_regular_file(caption_path, ec)) {
        std::string text;
        if (!read_bytes(caption_path, text, error))
            return skip("cannot read its caption file " + caption_path.string() + " (" + error +
                        "); check that it is readable");
        if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);  // byte-order mark
        if (const std::optional<TextPosition> bad = find_invalid_utf8(text)) {
            return skip("its caption file " + caption_path.string() + " is not valid UTF-8 (line " +
                        std::to_string(bad->line) + ", column " + std::to_string(bad->column) +
                        "); save it as UTF-8");
        }
        record.caption_path = caption_path;
        record.caption = std::move(text);
    }
    if (trim_ascii_space(record.caption).empty() && cfg.default_caption)
        record.caption = *cfg.default_caption;
    for (std::size_t i = 0; i < controls.size(); ++i) {
        auto control = control_of(path, controls[i], cfg.control_path[i], out.fatal);
        if (!control) return out;
        record.controls.push_back(std::move(control));
    }
    if (inpaints != nullptr) {
        record.inpaint =
            control_of(path, *inpaints, cfg.inpaint_path.front(), out.fatal, kInpaintPair);
        if (!record.inpaint) return out;
    }
    out.record = std::move(record);
    return out;
}

// ai-toolkit's most control folders (Qwen-Image-Edit-2509's three pictures).
constexpr std::size_t kMaxControlFolders = 3;

// The image files of `folder`, one of control_path's (or inpaint_path's) folders (not its
// subfolders: ai-toolkit pairs by file name).
ControlFiles list_controls(const config::DatasetConfig& cfg, const std::string& folder,
                           const PairKind& kind = kControlPair) {
    const std::string key = std::string("datasets[].") + kind.key;
    const std::size_t folders = kind.alpha ? cfg.inpaint_path.size() : cfg.control_path.size();
    if (folders > (kind.alpha ? 1 : kMaxControlFolders)) {
        throw DatasetError(cfg.folder_path,
                           key + " lists " + std::to_string(folders) + " folders; " +
                               (kind.alpha ? "an inpaint image pairs from one folder: keep one"
                                           : "at most 3 control images pair with a training "
                                             "image: keep 3 or fewer"));
    }
    if (cfg.is_video()) {
        throw DatasetError(cfg.folder_path, key + " " + folder +
                                                " is set on a video dataset (num_frames > 1); " +
                                                kind.noun + "s pair with images only: drop " +
                                                kind.key + " or num_frames");
    }
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) {
        throw DatasetError(cfg.folder_path,
                           key + " " + folder +
                               (fs::exists(folder, ec) ? " is not a folder" : " does not exist") +
                               "; set it to the folder of " + kind.noun +
                               "s, named as the images in " + cfg.folder_path);
    }
    ControlFiles out;
    for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
        const fs::path& p = e.path();
        std::error_code e2;
        if (hidden(p) || !e.is_regular_file(e2) || !is_supported_image_name(p)) continue;
        out[p.stem().string()].push_back(p);
    }
    if (ec)
        throw DatasetError(cfg.folder_path, std::string("cannot list ") + kind.key + " " + folder +
                                                " (" + ec.message() + "); check its permissions");
    for (auto& [stem, files] : out) std::sort(files.begin(), files.end());
    return out;
}

}  // namespace

DatasetError::DatasetError(std::string folder, const std::string& message)
    : Error(message), folder_(std::move(folder)) {}

bool is_supported_image_name(const fs::path& path) {
    const std::string ext = lower(path.extension().string());
    return ext == ".jpg" || ext == ".jpeg" || ext == ".png" || ext == ".webp";
}

bool is_unsupported_image_name(const fs::path& path) {
    const std::string ext = lower(path.extension().string());
    return ext == ".gif" || ext == ".bmp" || ext == ".tif" || ext == ".tiff" || ext == ".heic" ||
           ext == ".heif" || ext == ".avif" || ext == ".jxl";
}

std::vector<ImageSize> ScannedDataset::sizes() const {
    std::vector<ImageSize> out;
    out.reserve(images.size());
    for (const ImageRecord& r : images) out.push_back({r.width, r.height});
    return out;
}

ScannedDataset scan_dataset(const config::DatasetConfig& cfg, const ScanOptions& options) {
    const Logger log = logger("data");
    const std::string folder_text = cfg.folder_path;
    const bool video = cfg.is_video();
    const std::string kinds = video ? kClipKinds : kImageKinds;
    const std::string files_word = video ? "images or clips" : "images";
    const std::string folder_of =
        video ? std::string(kImageKinds) + " images or .mp4, .webm, .mov or .mkv clips"
              : std::string(kImageKinds) + " images";
    if (folder_text.empty())
        throw DatasetError(folder_text,
                           "datasets[].folder_path is empty; set it to a folder of " + folder_of);
    const fs::path folder(folder_text);
    std::error_code ec;
    const fs::file_status status = fs::status(folder, ec);
    if (!fs::exists(status))
        throw DatasetError(folder_text, "dataset folder " + folder_text +
                                            " does not exist; set datasets[].folder_path to a "
                                            "folder of " +
                                            folder_of);
    if (!fs::is_directory(status))
        throw DatasetError(folder_text, "dataset folder_path " + folder_text +
                                            " is not a folder; set it to the folder that holds "
                                            "the " +
                                            files_word);

    // Supported and recognised-but-unsupported images, and a video dataset's clips.
    std::vector<fs::path> files;
    std::size_t unsupported = 0;
    fs::recursive_directory_iterator it(folder, fs::directory_options::skip_permission_denied, ec);
    if (ec)
        throw DatasetError(folder_text, "cannot list dataset folder " + folder_text + " (" +
                                            ec.message() + "); check its permissions");
    for (const fs::recursive_directory_iterator end; it != end; it.increment(ec)) {
        if (ec) {
            log.warn("cannot list part of {} ({}); its images are left out", folder_text,
                     ec.message());
            ec.clear();
            break;
        }
        const fs::directory_entry& entry = *it;
        const fs::path& p = entry.path();
        std::error_code e;
        if (entry.is_directory(e)) {
            if (hidden(p) || p.filename() == "_controls") it.disable_recursion_pending();
            continue;
        }
        // Regular files, and dangling symlinks (reported as unreadable rather than ignored).
        const bool dangling = entry.is_symlink(e) && !fs::exists(fs::status(p, e));
        if (hidden(p) || !(entry.is_regular_file(e) || dangling)) continue;
        if (is_supported_image_name(p) || (video && is_video_name(p))) {
            files.push_back(p);
        } else if (is_unsupported_image_name(p)) {
            files.push_back(p);
            ++unsupported;
        }
    }
    std::sort(files.begin(), files.end());

    if (files.size() == unsupported) {
        if (unsupported > 0) {
            for (const fs::path& p : files) {
                const Outcome o = examine(p, cfg, {}, nullptr);
                log.warn("{}", o.warning);
                if (options.on_warning) options.on_warning({p, o.warning});
            }
            throw DatasetError(folder_text, "dataset folder " + folder_text + " has no " +
                                                files_word + " loom can read (" + kinds +
                                                "), only " + std::to_string(unsupported) +
                                                (video ? " images" : "") +
                                                " in other formats; convert them to PNG, JPEG "
                                                "or WebP");
        }
        throw DatasetError(folder_text, "dataset folder " + folder_text + " has no " + files_word +
                                            " (" + kinds + "); add " + files_word +
                                            " or fix datasets[].folder_path");
    }

    std::vector<ControlFiles> controls;
    for (const std::string& folder : cfg.control_path)
        controls.push_back(list_controls(cfg, folder));
    const std::optional<ControlFiles> inpaints =
        cfg.has_inpaint() ? std::optional<ControlFiles>(
                                list_controls(cfg, cfg.inpaint_path.front(), kInpaintPair))
                          : std::nullopt;
    // Decoding dominates: examine files on up to num_workers threads, report in sorted order.
    std::vector<Outcome> outcomes(files.size());
    const std::size_t threads =
        std::clamp<std::size_t>(std::size_t(std::max(cfg.num_workers, 1)), 1, files.size());
    std::atomic<std::size_t> next{0};
    auto work = [&] {
        for (std::size_t i = next++; i < files.size(); i = next++)
            outcomes[i] = examine(files[i], cfg, controls, inpaints ? &*inpaints : nullptr);
    };
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();

    ScannedDataset out;
    out.folder = folder;
    for (std::size_t i = 0; i < files.size(); ++i) {
        Outcome& o = outcomes[i];
        if (!o.fatal.empty()) throw DatasetError(folder_text, o.fatal);
        if (o.record) {
            out.images.push_back(std::move(*o.record));
        } else {
            ++out.skipped;
            log.warn("{}", o.warning);
            if (options.on_warning) options.on_warning({files[i], o.warning});
        }
    }
    if (out.images.empty())
        throw DatasetError(folder_text, "none of the " + std::to_string(files.size()) + " " +
                                            files_word + " in " + folder_text +
                                            " could be used (each was skipped with a warning "
                                            "above); fix or replace them");
    const std::size_t clips = static_cast<std::size_t>(std::count_if(
        out.images.begin(), out.images.end(), [](const ImageRecord& r) { return r.is_clip(); }));
    if (video) {
        log.info("dataset {}: {} clips, {} images, {} skipped", folder_text, clips,
                 out.images.size() - clips, out.skipped);
    } else {
        log.info("dataset {}: {} images, {} skipped", folder_text, out.images.size(), out.skipped);
    }
    return out;
}

}  // namespace loom::data
