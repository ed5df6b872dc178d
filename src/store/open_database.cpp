#include "open_database.h"

#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <sqlite3.h>

#include <chrono>
#include <sstream>
#include <system_error>
#include <thread>

#include "loom/core/error.h"
#include "loom/core/logging.h"

namespace loom::store {

namespace {

// What a user can do about a store that cannot be read; appended to every such message. The
// store only speeds up later runs, so starting a new one loses nothing a run needs.
const char* const kMoveAside =
    "move it aside and loom starts a new store; nothing in your run folders depends on it";

std::string hex(std::int32_t value) {
    std::ostringstream out;
    out << "0x" << std::hex << static_cast<std::uint32_t>(value);
    return out.str();
}

// The newest version, after checking the list is 1, 2, ..., N: a gap or a repeat is a bug in
// loom (or a test), and migrating with it would leave databases that no later loom can trust.
int newest_version(const std::vector<Migration>& migrations) {
    if (migrations.empty()) throw Error("the stable store's migration list is empty");
    for (std::size_t i = 0; i < migrations.size(); ++i) {
        if (migrations[i].version != static_cast<int>(i) + 1) {
            throw Error(
                "the stable store's migrations must be numbered 1, 2, ... in order; entry " +
                std::to_string(i) + " has version " + std::to_string(migrations[i].version));
        }
    }
    return migrations.back().version;
}

StoreError newer_schema_error(const std::filesystem::path& file, int found, int newest) {
    return StoreError(file, "was written by a newer loom (schema " + std::to_string(found) +
                                ", this loom knows up to " + std::to_string(newest) +
                                "); use that loom or pass --store to use another file");
}

void create_folder(const std::filesystem::path& file) {
    const std::filesystem::path folder = file.parent_path();
    if (folder.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    if (ec) {
        throw StoreError(file, "cannot create its folder " + folder.string() + " (" + ec.message() +
                                   "); pass --store with a writable path or set LOOM_HOME");
    }
}

// Refuses, before anything is written, a file this loom must not touch: some other program's
// database, or a loom store from a newer schema. Reading the header is also where SQLite first
// notices a file that is not a database at all (SQLITE_NOTADB), which store_error reports.
void check_identity(SQLite::Database& db, const std::filesystem::path& file, int newest) {
    // One read transaction, so that another process creating the schema at this moment is seen
    // wholly before or wholly after its migration (never tables without the application_id).
    SQLite::Transaction snapshot(db);
    const int version = read_schema_version(db);
    const std::int32_t application_id = db.execAndGet("PRAGMA application_id").getInt();
    if (application_id != 0 && application_id != kStoreApplicationId) {
        throw StoreError(file, "is a SQLite database of another program (application_id " +
                                   hex(application_id) +
                                   "), not a loom stable store; loom leaves it alone: pass "
                                   "--store with another file");
    }
    if (version > newest) throw newer_schema_error(file, version, newest);
    // migrate() sets the application_id in the transaction of a store's first migration, so an
    // unmarked database that already holds tables belongs to someone else.
    if (application_id == 0 && db.execAndGet("SELECT count(*) FROM sqlite_master").getInt64() > 0) {
        throw StoreError(file,
                         "is a SQLite database with tables that are not loom's, not a loom stable "
                         "store; loom leaves it alone: pass --store with another file");
    }
    snapshot.commit();
}

// WAL lets readers (a run asking for known plans, `loom stable list`) go on while another
// process writes, and makes each short write cheap. The mode is stored in the file, so this is
// a no-op after the first open.
void enable_wal(SQLite::Database& db, const std::filesystem::path& file) {
    const std::string mode = db.execAndGet("PRAGMA journal_mode = WAL").getString();
    if (mode != "wal") {
        logger("store").warn(
            "{}: SQLite cannot use WAL mode here (journal mode stays '{}'; network file systems "
            "often refuse it); concurrent runs may wait on each other longer",
            file.string(), mode);
    }
}

// Brings the database to the newest migration. Each migration runs in its own BEGIN IMMEDIATE
// transaction, which takes the write lock up front: when two processes open a fresh store at
// once, the second waits (busy timeout), then re-reads user_version inside its transaction and
// finds the work done. A migration that fails rolls back whole and the file stays at the
// previous version. Foreign keys are off while migrations run (a rebuilt table is dropped and
// its copy renamed, which SQLite only allows so), and each migration checks them before it
// commits.
void migrate(SQLite::Database& db, const std::filesystem::path& file,
             const std::vector<Migration>& migrations, int newest) {
    int current = read_schema_version(db);
    for (const Migration& m : migrations) {
        if (m.version <= current) continue;
        SQLite::Transaction transaction(db, SQLite::TransactionBehavior::IMMEDIATE);
        current = read_schema_version(db);
        if (current > newest) throw newer_schema_error(file, current, newest);
        if (m.version <= current) continue;  // another process got here first; nothing to undo
        db.exec(m.sql);
        {
            SQLite::Statement violations(db, "PRAGMA foreign_key_check");
            if (violations.executeStep()) {
                throw StoreError(
                    file, "schema migration " + std::to_string(m.version) + " left a row of " +
                              violations.getColumn(0).getString() + " without its parent in " +
                              violations.getColumn(2).getString() + "; the store was not changed");
            }
        }
        // Both pragmas write the file header inside this transaction, so they commit (or roll
        // back) together with the migration's tables.
        db.exec("PRAGMA user_version = " + std::to_string(m.version));
        db.exec("PRAGMA application_id = " + std::to_string(kStoreApplicationId));
        transaction.commit();
        logger("store").debug("{}: schema {} -> {}", file.string(), current, m.version);
        current = m.version;
    }
}

// SQLite answers SQLITE_BUSY at once, without waiting in its busy handler, in a few cases that
// arise while several processes set up the same fresh file: switching the journal to WAL while
// another connection reads it is the common one. Every step of the set-up can be repeated (the
// checks read, the pragmas are idempotent, each migration re-reads the version in its own
// transaction), so the whole set-up is retried until the busy timeout has passed.
template <class Steps>
void retry_while_busy(std::chrono::milliseconds timeout, Steps&& steps) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        try {
            steps();
            return;
        } catch (const SQLite::Exception& e) {
            const int code = e.getErrorCode() & 0xff;
            const bool busy =
                e.getErrorCode() >= 0 && (code == SQLITE_BUSY || code == SQLITE_LOCKED);
            if (!busy || std::chrono::steady_clock::now() >= deadline) throw;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
}

}  // namespace

int read_schema_version(SQLite::Database& db) {
    return db.execAndGet("PRAGMA user_version").getInt();
}

StoreError store_error(const std::filesystem::path& file, const std::string& doing,
                       const SQLite::Exception& e) {
    const int code = e.getErrorCode() < 0 ? -1 : (e.getErrorCode() & 0xff);
    const std::string sqlite = "SQLite: " + std::string(e.what()) + ", while " + doing;
    switch (code) {
        case SQLITE_NOTADB:
        case SQLITE_CORRUPT:
            return StoreError(
                file, "is damaged or not a SQLite database (" + sqlite + "); " + kMoveAside);
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
            return StoreError(file,
                              "stayed locked by another process longer than the busy "
                              "timeout (" +
                                  sqlite + "); try again when the other loom has finished writing");
        case SQLITE_READONLY:
            return StoreError(file, "cannot be written (" + sqlite +
                                        "); make the file and its folder writable, or pass "
                                        "--store with another file");
        case SQLITE_CANTOPEN:
        case SQLITE_PERM:
            return StoreError(file, "cannot be opened (" + sqlite +
                                        "); check that its folder exists and is writable, or "
                                        "pass --store with another file");
        case SQLITE_FULL:
            return StoreError(file, "cannot grow: the disk is full (" + sqlite +
                                        "); free some space and try again");
        default: return StoreError(file, "cannot be used (" + sqlite + ")");
    }
}

std::unique_ptr<SQLite::Database> open_database(const std::filesystem::path& file,
                                                const StoreOptions& options) {
    const int newest = newest_version(options.migrations);
    create_folder(file);
    std::unique_ptr<SQLite::Database> db;
    // What the open was doing when SQLite failed, for the message.
    std::string doing = "opening it";
    try {
        // The busy timeout is set before the first statement, so that a step that waits for
        // another process's lock waits in SQLite's busy handler.
        db = std::make_unique<SQLite::Database>(file.string(),
                                                SQLite::OPEN_READWRITE | SQLite::OPEN_CREATE,
                                                static_cast<int>(options.busy_timeout.count()));
        retry_while_busy(options.busy_timeout, [&] {
            doing = "reading its header";
            check_identity(*db, file, newest);
            doing = "switching it to WAL mode";
            enable_wal(*db, file);
            // synchronous=NORMAL is safe from corruption in WAL mode and saves an fsync per
            // write.
            db->exec("PRAGMA synchronous = NORMAL");
            doing = "bringing its schema to version " + std::to_string(newest);
            db->exec("PRAGMA foreign_keys = OFF");  // see migrate
            migrate(*db, file, options.migrations, newest);
            // Foreign keys are off by default in SQLite, and per connection.
            db->exec("PRAGMA foreign_keys = ON");
        });
    } catch (const SQLite::Exception& e) {
        throw store_error(file, doing, e);
    }
    return db;
}

}  // namespace loom::store
