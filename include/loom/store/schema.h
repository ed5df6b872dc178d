#pragma once

// The stable store's schema as an ordered list of migrations. A database records the version it
// has reached in SQLite's `PRAGMA user_version`; opening it runs each newer migration once, in
// order, each in its own transaction (stable_store.h). Migrations are append-only: once released,
// a migration's SQL never changes, and a new schema is a new entry at the end.

#include <cstdint>
#include <string>
#include <vector>

namespace loom::store {

struct Migration {
    int version = 0;  // the user_version the database has after `sql` ran: 1, 2, 3, ...
    std::string sql;  // one or more statements
};

// Every migration of this loom, versions 1..N in order.
const std::vector<Migration>& schema_migrations();

// SQLite's `PRAGMA application_id` of a loom store ("loom" in ASCII), set with user_version by
// every migration. It tells a loom store from some other program's SQLite database that --store
// happens to point at.
inline constexpr std::int32_t kStoreApplicationId = 0x6c6f6f6d;

}  // namespace loom::store
