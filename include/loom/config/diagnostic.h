#pragma once

// Warnings found while loading a job. They never stop a job unless --strict turns them into
// errors; each names where it was found and the key path.

#include <string>

namespace loom::config {

enum class DiagnosticKind {
    kUnknownKey,       // a key neither loom nor ai-toolkit knows (likely a typo)
    kNotSupportedYet,  // an ai-toolkit key or value that loom does not implement yet
    kNotTrainable,     // a valid model architecture that loom cannot train yet
    kNote,             // anything else worth a line (e.g. a key whose meaning differs)
};

struct Diagnostic {
    DiagnosticKind kind = DiagnosticKind::kNote;
    std::string where;     // "file:line:col" or "--set PATH=VALUE"
    std::string key_path;  // "config.process.0.train.lr"
    std::string message;   // complete sentence, without the location prefix

    // "job.yaml:3:5: warning: <message>"
    std::string to_string() const;
};

}  // namespace loom::config
