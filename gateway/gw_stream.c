/*
 * gateway/gw_stream.c — a committed stream, from the upstream to the client: server-sent events
 * passed through, rewritten only when they must be (completion guards, a renamed model, a usage
 * chunk the client did not ask for), and ended cleanly however the upstream ends.
 *
 * Why it is shaped so:
 *   - gw_stream_read is libmicrohttpd's content reader: it is called when the client can take
 *     bytes, and only then pumps the upstream transfer (gw_call_pump) — the backpressure.
 *   - Events pass through byte for byte unless something must change; then the event's JSON is
 *     rewritten with cJSON (text through the streaming filter, the public model name).
 *   - Whatever happens after the commit, the client gets a well-formed end: [DONE] after a finish
 *     reason; an in-band error event then [DONE] when the upstream breaks the stream or goes
 *     idle; a content_filter chunk then [DONE] when a rule blocks (the upstream call is cancelled
 *     then, so the generation stops).
 */
#include "gateway/gw_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static void put_event(api_buf *out, cJSON *root) {
    char *s = cJSON_PrintUnformatted(root);
    mtCheck(s != NULL, "out of memory writing a stream event");
    api_buf_puts(out, "data: ");
    api_buf_puts(out, s);
    api_buf_puts(out, "\n\n");
    free(s);
}

/* set choices[0]'s text (or delta.content) and optionally its finish_reason */
static void set_choice(gw_exchange *x, cJSON *root, const char *text, size_t n,
                       const char *finish) {
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0);
    if (!c0) return;
    cJSON *holder = c0;
    if (x->chat) {
        holder = cJSON_GetObjectItemCaseSensitive(c0, "delta");
        if (!cJSON_IsObject(holder)) {
            cJSON_DeleteItemFromObjectCaseSensitive(c0, "delta");
            holder = cJSON_AddObjectToObject(c0, "delta");
        }
    }
    const char *field = x->chat ? "content" : "text";
    char *t = strndup(text ? text : "", n);
    mtCheck(t != NULL, "out of memory writing a stream event");
    cJSON_DeleteItemFromObjectCaseSensitive(holder, field);
    cJSON_AddStringToObject(holder, field, t);
    free(t);
    if (finish) {
        cJSON_DeleteItemFromObjectCaseSensitive(c0, "finish_reason");
        cJSON_AddStringToObject(c0, "finish_reason", finish);
    }
}

static void rename_model(gw_exchange *x, cJSON *root) {
    cJSON_DeleteItemFromObjectCaseSensitive(root, "model");
    cJSON_AddStringToObject(root, "model", x->g->cfg.routes[x->route].name);
}

/* An event synthesised by the gateway: the filter's last bytes, or the content_filter stop. */
static void put_own_event(gw_exchange *x, const char *text, size_t n, const char *finish) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", x->req_id);
    cJSON_AddStringToObject(root, "object", x->chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(root, "created", (double)time(NULL));
    cJSON_AddStringToObject(root, "model", x->g->cfg.routes[x->route].name);
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    cJSON *c0 = cJSON_CreateObject();
    cJSON_AddNumberToObject(c0, "index", 0);
    if (finish) cJSON_AddStringToObject(c0, "finish_reason", finish);
    else cJSON_AddNullToObject(c0, "finish_reason");
    cJSON_AddItemToArray(choices, c0);
    set_choice(x, root, text, n, NULL);
    put_event(&x->out, root);
    cJSON_Delete(root);
}

static void end_stream(gw_exchange *x) {
    api_buf_puts(&x->out, "data: [DONE]\n\n");
    x->phase = GW_PH_END;
}

/* The upstream broke the stream after it was committed: tell the client in-band. */
static void stream_broken(gw_exchange *x, const char *why) {
    gw_gateway *g = x->g;
    if (!x->finished) {
        api_error e;
        api_fail(&e, 502, "server_error", NULL, "upstream_stream_broken",
                "the upstream stream ended early (%s)", why);
        api_buf_puts(&x->out, "data: ");
        api_error_json(&x->out, &e);
        api_buf_puts(&x->out, "\n\n");
        pthread_mutex_lock(&g->mx.mu);
        g->mx.stream_broken++;
        pthread_mutex_unlock(&g->mx.mu);
        gw_up_report(x, x->call_up, GW_OUT_TRANSPORT, 0);
        gw_log(g, "req=%s stream from %s broke after its first event: %s", x->req_id,
               g->up[x->call_up].cfg.name, why);
    }
    end_stream(x);
}

static void handle_event(gw_exchange *x, const char *raw, size_t raw_len, const char *data,
                         size_t n) {
    gw_gateway *g = x->g;
    gw_event_info ev;
    char *text = NULL;
    size_t tl = 0;
    x->t_last = api_now();
    if (n == 0) return;
    if (gw_event_parse(data, n, x->chat, &ev, &text, &tl) != 0) {
        stream_broken(x, "an event that is not JSON");
        return;
    }
    if (ev.prompt_tokens >= 0) x->prompt_tokens = ev.prompt_tokens;
    if (ev.completion_tokens >= 0) x->completion_tokens = ev.completion_tokens;
    int guard = gw_rules_active(g->rules, GW_ON_COMPLETIONS);
    if (ev.done) {
        if (guard && !x->finished) { /* release what the filter still holds */
            api_buf rest = {0};
            gw_filter_push(&x->filt, "", 0, 1, &rest);
            if (rest.len) put_own_event(x, rest.p, rest.len, NULL);
            api_buf_free(&rest);
        }
        end_stream(x);
    } else if (ev.is_error) {
        api_buf_put(&x->out, raw, raw_len);
        x->finished = 1;
    } else if (ev.usage_only) {
        if (x->client_usage) {
            if (x->renamed) {
                cJSON *root = cJSON_ParseWithLength(data, n);
                rename_model(x, root);
                put_event(&x->out, root);
                cJSON_Delete(root);
            } else {
                api_buf_put(&x->out, raw, raw_len);
            }
        }
    } else if (ev.has_choice) {
        if (ev.finish[0]) {
            x->finished = 1;
            snprintf(x->finish, sizeof(x->finish), "%s", ev.finish);
        }
        if (!guard && !x->renamed) {
            api_buf_put(&x->out, raw, raw_len);
        } else {
            api_buf rel = {0};
            int blocked = gw_filter_push(&x->filt, text ? text : "", tl, ev.finish[0] != 0, &rel);
            if (blocked) {
                put_own_event(x, rel.p, rel.len, "content_filter");
                pthread_mutex_lock(&g->mx.mu);
                g->mx.blocked_completions++;
                pthread_mutex_unlock(&g->mx.mu);
                gw_log(g, "req=%s stream stopped by content rule '%s'", x->req_id, x->filt.rule);
                x->finished = 1;
                snprintf(x->finish, sizeof(x->finish), "content_filter");
                gw_call_put(g, x->call); /* stop the generation upstream */
                x->call = NULL;
                end_stream(x);
            } else if (rel.len || ev.finish[0]) {
                cJSON *root = cJSON_ParseWithLength(data, n);
                set_choice(x, root, rel.p, rel.len, NULL);
                if (x->renamed) rename_model(x, root);
                put_event(&x->out, root);
                cJSON_Delete(root);
            }
            api_buf_free(&rel);
        }
        if (x->ttft < 0 && x->out.len) x->ttft = api_now() - x->t0;
    }
    free(text);
}

long gw_stream_read(gw_exchange *x, char *buf, size_t max) {
    gw_gateway *g = x->g;
    for (;;) {
        long k = api_buf_drain(&x->out, &x->out_off, buf, max);
        if (k >= 0) return k;
        if (x->phase == GW_PH_END) return 0;
        gw_call *c = x->call;
        if (!c) {
            end_stream(x);
            continue;
        }
        if (gw_sse_next(&c->sse, &x->ev_raw, &x->ev_data)) {
            handle_event(x, x->ev_raw.p, x->ev_raw.len, x->ev_data.p, x->ev_data.len);
            x->ev_raw.len = 0;
            continue;
        }
        if (c->done) {
            if (x->finished) end_stream(x); /* a finish reason came, [DONE] did not: fine */
            else stream_broken(x, c->result == CURLE_OK ? "closed" : curl_easy_strerror(c->result));
            continue;
        }
        double left = g->cfg.pol.stream_idle_timeout_s - (api_now() - x->t_last);
        if (left <= 0) {
            stream_broken(x, "idle timeout");
            continue;
        }
        if (gw_call_pump(g, c, left, x->client_fd) < 0) return -1; /* client gone, or stopping */
    }
}

