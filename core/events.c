/*
 * core/events.c — building run.db event details with cJSON (see core/events.h for the vocabulary).
 *
 * Shape: thin wrappers over cJSON that never fail silently (out of memory exits through mtCheck,
 * as every allocation in minitrain does) and one rule cJSON lacks: a non-finite number becomes a
 * string, because cJSON would print it as null and a NaN loss is exactly what an event must show.
 */
#include "core/events.h"

#include <math.h>
#include <stdlib.h>

#include "core/check.h"

cJSON *ev_detail(void) {
    cJSON *d = cJSON_CreateObject();
    mtCheck(d != NULL, "out of memory building an event detail");
    return d;
}

static void add(cJSON *d, const char *key, cJSON *item) {
    mtCheck(item != NULL && cJSON_AddItemToObject(d, key, item), "out of memory building an "
            "event detail");
}

void ev_num(cJSON *d, const char *key, double v) {
    if (isfinite(v)) add(d, key, cJSON_CreateNumber(v));
    else add(d, key, cJSON_CreateString(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"));
}

void ev_str(cJSON *d, const char *key, const char *s) {
    add(d, key, s != NULL ? cJSON_CreateString(s) : cJSON_CreateNull());
}

void ev_bool(cJSON *d, const char *key, int b) { add(d, key, cJSON_CreateBool(b != 0)); }

void ev_strv(cJSON *d, const char *key, char *const *v, int n) {
    cJSON *a = cJSON_CreateArray();
    mtCheck(a != NULL, "out of memory building an event detail");
    for (int i = 0; i < n; i++) {
        cJSON *s = cJSON_CreateString(v[i] != NULL ? v[i] : "");
        mtCheck(s != NULL && cJSON_AddItemToArray(a, s), "out of memory building an event detail");
    }
    add(d, key, a);
}

void ev_numv(cJSON *d, const char *key, const double *v, int n) {
    cJSON *a = cJSON_CreateArray();
    mtCheck(a != NULL, "out of memory building an event detail");
    for (int i = 0; i < n; i++) {
        cJSON *x = isfinite(v[i]) ? cJSON_CreateNumber(v[i])
                                  : cJSON_CreateString(isnan(v[i]) ? "nan" : v[i] > 0 ? "inf" : "-inf");
        mtCheck(x != NULL && cJSON_AddItemToArray(a, x), "out of memory building an event detail");
    }
    add(d, key, a);
}

char *ev_text(const cJSON *d) {
    if (d == NULL) return NULL;
    char *s = cJSON_PrintUnformatted(d);
    mtCheck(s != NULL, "out of memory printing an event detail");
    return s;
}

void ev_log(rundb *db, int64_t run_id, const char *kind, int rank, cJSON *d) {
    if (db != NULL) {
        char *s = ev_text(d);
        rundb_log_event(db, run_id, kind, rank, s);
        cJSON_free(s);
    }
    cJSON_Delete(d);
}
