/*
 * db/db_impl.h — what the files of db/ share and nobody else sees: the connection behind db_conn,
 * the classification of libpq errors into DB_E* codes, and the table descriptors that the shipper
 * (db/db_ship.c) and the reader (db/db_read.c) both walk, so the two cannot disagree on a column.
 */
#ifndef MT_DB_IMPL_H
#define MT_DB_IMPL_H

#include <libpq-fe.h>

#include "db/db.h"

struct db_conn {
    PGconn *pg;
    int timed_out; /* the last statement got no answer within DB_STATEMENT_DEADLINE_S */
};

/* The longest minitrain waits for a statement's answer before it drops the connection (seconds).
 * A frozen server (SIGSTOP, a hung VM) keeps its TCP connection open, so neither TCP keepalives
 * nor connect_timeout end the wait; the socket is shut down instead, the statement counts as
 * DB_EDOWN and is sent again after a reconnect (shipping is idempotent). Not statement_timeout:
 * a COMMIT cancelled while it waits for the synchronous standby reports success with a warning,
 * and a failover can then lose what it wrote (seen in tests/run_db_ha.sh). */
#define DB_STATEMENT_DEADLINE_S 30

/* One run.db table as shipped: its name (the same in PostgreSQL), its columns after the key (in
 * run.db order, without rowid), and each column's kind: 'i' integer, 'r' real, 't' text.
 * mutable_: rows are updated in place in run.db (runs: ended_at/status; checkpoints: state), so
 * the shipper upserts them instead of inserting once; tcol names the column whose value moves on
 * every update (NULL = re-send every row each pass: runs has one row per restart). */
typedef struct {
    const char *name;
    const char *const *cols;
    const char *kinds;
    int mutable_;
    const char *tcol;
} db_table;
extern const db_table db_tables[DB_NTABLES];

/* Turn a failed result (res may be NULL: then the connection's message) into one line "WHAT:
 * <server message> (SQLSTATE xxxxx)" in err and a DB_E* code: DB_EDOWN for a broken connection,
 * SQLSTATE class 08, 25006 (read-only transaction: we reached a standby or a demoted primary),
 * 57P01..57P03 (shutdown, cannot connect now); DB_EFAIL otherwise. Clears res. */
int db_pg_error(PGconn *pg, PGresult *res, const char *what, char *err, size_t errlen);

/* Run one command (no rows expected). 0 or a DB_E* code. */
int db_pg_exec(db_conn *c, const char *sql, char *err, size_t errlen);

/* Run a query with text parameters and return its result (PGRES_TUPLES_OK or COMMAND_OK), or
 * NULL with a DB_E* code in *code and err. */
PGresult *db_pg_query(db_conn *c, const char *sql, int nparams, const char *const *params,
                      int *code, char *err, size_t errlen);

/* The cluster's identity (table cluster of the schema, a UUID made by the first migration and
 * replicated with the data), so run.db's marks belong to one cluster, not to one URL. */
int db_cluster_id(db_conn *c, char out[64], char *err, size_t errlen);

#endif /* MT_DB_IMPL_H */
