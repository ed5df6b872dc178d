#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <string>
#include <vector>

#include "io_test_util.h"
#include "loom/core/error.h"
#include "loom/io/atomic_file.h"

namespace loom {
namespace {

using test::list_folder;
using test::read_file;

std::string temp_name(const std::string& name) {
    return name + ".tmp." + std::to_string(::getpid());
}

TEST(AtomicFile, WritesANewFileAndLeavesNoTemporary) {
    test::TempDir dir;
    write_file_atomic(dir / "state.json", "{\"step\": 1}\n");
    EXPECT_EQ(read_file(dir / "state.json"), "{\"step\": 1}\n");
    EXPECT_EQ(list_folder(dir.path()), std::vector<std::string>{"state.json"});
}

TEST(AtomicFile, ReplacesExistingContents) {
    test::TempDir dir;
    write_file_atomic(dir / "state.json", std::string(10000, 'a'));
    write_file_atomic(dir / "state.json", "short");
    EXPECT_EQ(read_file(dir / "state.json"), "short");
    write_file_atomic(dir / "state.json", "");
    EXPECT_EQ(read_file(dir / "state.json"), "");
    EXPECT_EQ(list_folder(dir.path()), std::vector<std::string>{"state.json"});
}

TEST(AtomicFile, StreamsSeveralWritesAndShowsNothingBeforeCommit) {
    test::TempDir dir;
    const auto path = dir / "big.bin";
    write_file_atomic(path, "old");
    AtomicFileWriter out(path);
    EXPECT_EQ(out.temp_path(), dir / temp_name("big.bin"));
    out.write("header|");
    const std::string chunk(1 << 20, 'x');
    out.write(chunk.data(), chunk.size());
    out.write(std::string_view());
    EXPECT_EQ(out.bytes_written(), 7u + chunk.size());
    EXPECT_EQ(read_file(path), "old");  // readers still see the old file
    EXPECT_EQ(list_folder(dir.path()), (std::vector<std::string>{"big.bin", temp_name("big.bin")}));
    out.commit();
    EXPECT_EQ(read_file(path), "header|" + chunk);
    EXPECT_EQ(list_folder(dir.path()), std::vector<std::string>{"big.bin"});
}

TEST(AtomicFile, AbandonedWriterRemovesTheTemporaryAndKeepsTheOldFile) {
    test::TempDir dir;
    const auto path = dir / "lora.safetensors";
    write_file_atomic(path, "old contents");
    {
        AtomicFileWriter out(path);
        out.write("half of the new conte");
        // An exception here (say, out of memory while converting a tensor) unwinds the writer.
    }
    EXPECT_EQ(read_file(path), "old contents");
    EXPECT_EQ(list_folder(dir.path()), std::vector<std::string>{"lora.safetensors"});
}

TEST(AtomicFile, MissingFolderThrowsIoErrorNamingThePath) {
    test::TempDir dir;
    write_file_atomic(dir / "keep.txt", "kept");
    const auto path = dir / "no_such_folder" / "out.bin";
    try {
        write_file_atomic(path, "data");
        FAIL() << "wrote into a missing folder";
    } catch (const IoError& e) {
        EXPECT_EQ(e.path(), path.string());
        EXPECT_EQ(std::string(e.what()),
                  path.string() + ": cannot create temporary file " + path.string() + ".tmp." +
                      std::to_string(::getpid()) +
                      ": No such file or directory (does the folder exist and is it writable?)");
    }
    EXPECT_EQ(read_file(dir / "keep.txt"), "kept");
    EXPECT_EQ(list_folder(dir.path()), std::vector<std::string>{"keep.txt"});
}

TEST(AtomicFile, FailedRenameKeepsTheTargetAndRemovesTheTemporary) {
    test::TempDir dir;
    // A non-empty folder where the file should go: rename(2) refuses to replace it.
    const auto path = dir / "target";
    std::filesystem::create_directory(path);
    write_file_atomic(path / "inside.txt", "inside");
    try {
        write_file_atomic(path, "data");
        FAIL() << "renamed over a folder";
    } catch (const IoError& e) {
        EXPECT_EQ(std::string(e.what()), path.string() + ": cannot rename " + path.string() +
                                             ".tmp." + std::to_string(::getpid()) +
                                             " over it: Is a directory");
    }
    EXPECT_EQ(list_folder(dir.path()), std::vector<std::string>{"target"});
    EXPECT_EQ(read_file(path / "inside.txt"), "inside");
}

// A write that fails half way (here: the file size limit, as a full disk would) throws and leaves
// the previous file as it was.
TEST(AtomicFile, FailedWriteKeepsTheOldFile) {
    test::TempDir dir;
    const auto path = dir / "checkpoint.bin";
    write_file_atomic(path, "previous checkpoint");

    rlimit saved{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limited = saved;
    limited.rlim_cur = 4096;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
    std::string message;
    try {
        AtomicFileWriter out(path);
        out.write(std::string(8192, 'n'));
        out.commit();
    } catch (const IoError& e) {
        message = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, old_handler);

    EXPECT_EQ(message, path.string() + ": cannot write " + path.string() + ".tmp." +
                           std::to_string(::getpid()) + ": File too large (is the disk full?)");
    EXPECT_EQ(read_file(path), "previous checkpoint");
    EXPECT_EQ(list_folder(dir.path()), std::vector<std::string>{"checkpoint.bin"});
}

TEST(AtomicFile, WriterIsFinishedAfterCommit) {
    test::TempDir dir;
    const auto path = dir / "a.txt";
    AtomicFileWriter out(path);
    out.write("x");
    out.commit();
    EXPECT_THROW(out.write("y"), IoError);
    EXPECT_THROW(out.commit(), IoError);
    EXPECT_EQ(read_file(path), "x");
}

TEST(AtomicFile, BareFileNameUsesTheCurrentFolder) {
    test::TempDir dir;
    const auto cwd = std::filesystem::current_path();
    std::filesystem::current_path(dir.path());
    write_file_atomic("bare.txt", "here");
    std::filesystem::current_path(cwd);
    EXPECT_EQ(read_file(dir / "bare.txt"), "here");
}

}  // namespace
}  // namespace loom
