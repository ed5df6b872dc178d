#pragma once

// Inside the store layer: opening a store file (folder, pragmas, identity check, migrations) and
// turning SQLite's exceptions into StoreErrors that say what to do. Only the store's sources
// include this header; the public one (loom/store/stable_store.h) shows no SQLite types.

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Exception.h>

#include <filesystem>
#include <memory>
#include <string>

#include "loom/store/stable_store.h"
#include "loom/store/store_error.h"

namespace loom::store {

// Opens `file` (creating it and its folder), checks it is a loom store this loom can use, turns
// on WAL, foreign keys and the busy timeout, and applies the pending migrations. Throws
// StoreError as StableStore::open documents.
std::unique_ptr<SQLite::Database> open_database(const std::filesystem::path& file,
                                                const StoreOptions& options);

// The StoreError for a SQLite failure while `doing` something ("recording a stable plan"):
// names the file, SQLite's message, and what to do for the usual causes (a damaged file, a lock
// held past the busy timeout, a read-only file, a full disk).
StoreError store_error(const std::filesystem::path& file, const std::string& doing,
                       const SQLite::Exception& e);

// PRAGMA user_version: the schema version the database is at.
int read_schema_version(SQLite::Database& db);

}  // namespace loom::store
