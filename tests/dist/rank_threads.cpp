#include "rank_threads.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

namespace loom::dist {

int free_port() {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t n = sizeof a;
    ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
    ::close(s);
    return ntohs(a.sin_port);
}

void on_ranks(int world, const std::function<void(ProcessGroup&)>& body,
              std::chrono::milliseconds timeout) {
    const int port = free_port();
    std::vector<std::thread> ranks;
    std::vector<std::string> failures(static_cast<std::size_t>(world));
    for (int r = 0; r < world; ++r) {
        ranks.emplace_back([&, r] {
            try {
                RankFacts f;
                f.rank = r;
                f.world_size = world;
                f.local_rank = r;
                f.master_port = port;
                const std::unique_ptr<ProcessGroup> group = ProcessGroup::open(f, timeout);
                body(*group);
            } catch (const std::exception& e) {
                failures[std::size_t(r)] = e.what();
            }
        });
    }
    for (std::thread& t : ranks) t.join();
    for (int r = 0; r < world; ++r) EXPECT_EQ(failures[std::size_t(r)], "") << "rank " << r;
}

}  // namespace loom::dist
