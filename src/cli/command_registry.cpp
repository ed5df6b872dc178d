#include "command.h"

namespace loom::cli {

const std::vector<Command>& all_commands() {
    static const std::vector<Command> kCommands = {
        make_train_command(),       make_sample_command(),        make_config_check_command(),
        make_devices_command(),     make_doctor_command(),        make_stable_list_command(),
        make_stable_show_command(), make_stable_export_command(), make_stable_forget_command(),
        make_report_command(),      make_inspect_command(),       make_eval_command(),
        make_help_command(),
    };
    return kCommands;
}

const Command* find_command(const std::vector<std::string>& words, std::size_t& consumed) {
    const Command* best = nullptr;
    std::size_t best_words = 0;
    for (const Command& c : all_commands()) {
        // Split the command name into words and compare with the leading arguments.
        std::vector<std::string> name_words;
        std::string word;
        for (char ch : c.name + " ") {
            if (ch == ' ') {
                if (!word.empty()) name_words.push_back(word);
                word.clear();
            } else {
                word.push_back(ch);
            }
        }
        if (name_words.size() > words.size() || name_words.size() <= best_words) continue;
        bool match = true;
        for (std::size_t i = 0; i < name_words.size() && match; ++i) {
            match = name_words[i] == words[i];
        }
        if (match) {
            best = &c;
            best_words = name_words.size();
        }
    }
    consumed = best_words;
    return best;
}

ArgvBuffer::ArgvBuffer(const std::string& program, const std::vector<std::string>& args) {
    storage_.reserve(args.size() + 1);
    storage_.push_back(program);
    storage_.insert(storage_.end(), args.begin(), args.end());
    for (const std::string& s : storage_) pointers_.push_back(s.c_str());
}

}  // namespace loom::cli
