// Writes the tiny SD model and dataset of the trainer tests to a folder, for the end-to-end
// scripts that drive the `loom` executable:  make_tiny_fixture OUT_DIR  ->  OUT/model, OUT/data

#include <iostream>

#include "tiny_sd.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: make_tiny_fixture OUT_DIR\n";
        return 2;
    }
    const std::filesystem::path out = argv[1];
    loom::testing::make_tiny_sd(out / "model");
    loom::testing::make_dataset(out / "data", 6);
    std::cout << out.string() << "\n";
    return 0;
}
