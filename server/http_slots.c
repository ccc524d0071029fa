/*
 * http_slots.c - POST /slots/{id}?action=save|restore|erase, in llama-server's shape: the body names a
 * file ({"filename": "name.bin"}) inside the --slot-save-path folder; the answer reports what was saved
 * or restored ({"id_slot", "filename", "n_saved" | "n_restored", "n_written" | "n_read", "timings"}) or
 * erased ({"id_slot", "n_erased"}). What a slot is in Kiln, and what restoring does, is in slots.c.
 *
 * A filename is one path component of 1 .. 128 characters from [A-Za-z0-9._-], not starting with a dot:
 * no separator, no "..", nothing outside the folder. Errors: 400 for a bad id, action, body or filename
 * and for a state file that is refused (another model, another cache type, corrupt: the reader's message),
 * 404 for an empty slot or a missing file, 501 when the server has no --slot-save-path (save, restore) or
 * no prefix cache, 503 when the state does not fit beside the running requests.
 */
#include "http.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool valid_filename(const char *f) {
    size_t n = strlen(f);
    if (n == 0 || n > 128 || f[0] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        char c = f[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* The slot id of "/slots/{id}": 1 to 4 digits. */
static bool parse_slot(const char *url, int32_t *slot) {
    const char *id = url + strlen("/slots/");
    size_t n = strlen(id);
    if (n == 0 || n > 4 || strspn(id, "0123456789") != n) return false;
    *slot = (int32_t)atoi(id);
    return true;
}

/* The action's file name from the body, checked; NULL with err filled. */
static char *body_filename(const http_req *r, ks_api_error *err) {
    json_error_t je;
    json_t *root = json_loadb(r->body ? r->body : "", r->len, 0, &je), *f;
    char *name = NULL;
    if (!root || !json_is_object(root)) {
        ks_api_fail(err, 400, "invalid_request_error", "invalid_json", NULL,
                    "the body must be a JSON object with a \"filename\"");
    } else if (!(f = json_object_get(root, "filename")) || !json_is_string(f)) {
        ks_api_fail(err, 400, "invalid_request_error", "invalid_value", "filename",
                    "\"filename\" must be a string");
    } else if (!valid_filename(json_string_value(f))) {
        ks_api_fail(err, 400, "invalid_request_error", "invalid_value", "filename",
                    "invalid filename: 1 to 128 characters of A-Z a-z 0-9 . _ -, not starting with a dot");
    } else if (!(name = strdup(json_string_value(f)))) {
        ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    json_decref(root);
    return name;
}

static int http_status(kiln_status s) {
    switch (s) {
    case KILN_E_NOT_FOUND: return 404;
    case KILN_E_CONTEXT_FULL: return 503;
    case KILN_E_NOMEM:
    case KILN_E_IO:
    case KILN_E_INTERNAL: return 500;
    default: return 400;
    }
}

static char *answer(ks_slot_action action, int32_t slot, const char *name, const ks_slot_result *res) {
    json_t *o = json_object();
    char *text;
    json_object_set_new(o, "id_slot", json_integer(slot));
    if (action == KS_SLOT_ERASE) {
        json_object_set_new(o, "n_erased", json_integer(res->n_tokens));
    } else {
        bool save = action == KS_SLOT_SAVE;
        json_object_set_new(o, "filename", json_string(name));
        json_object_set_new(o, save ? "n_saved" : "n_restored", json_integer(res->n_tokens));
        json_object_set_new(o, save ? "n_written" : "n_read", json_integer((json_int_t)res->bytes));
        json_object_set_new(o, "timings", json_pack("{s:f}", save ? "save_ms" : "restore_ms", res->ms));
    }
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}

MHD_Result ks_http_slots(ks_http *h, http_req *r, const char *url) {
    const char *action = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "action");
    const char *dir = h->params->slot_save_path;
    ks_slot_action act;
    ks_slot_result res;
    ks_api_error err;
    int32_t slot;
    char *name = NULL, path[4096] = "";
    kiln_status s;
    if (!parse_slot(url, &slot))
        return ks_api_fail(&err, 400, "invalid_request_error", "invalid_value", "id_slot",
                           "the slot id must be a number"),
               ks_http_respond_error(h, r->conn, &err);
    if (!action || (strcmp(action, "save") && strcmp(action, "restore") && strcmp(action, "erase")))
        return ks_api_fail(&err, 400, "invalid_request_error", "invalid_value", "action",
                           "action must be save, restore or erase"),
               ks_http_respond_error(h, r->conn, &err);
    act = !strcmp(action, "save")      ? KS_SLOT_SAVE
          : !strcmp(action, "restore") ? KS_SLOT_RESTORE
                                       : KS_SLOT_ERASE;
    if (act != KS_SLOT_ERASE) {
        if (!dir)
            return ks_api_fail(&err, 501, "not_supported_error", NULL, NULL,
                               "slot save and restore need the server to run with --slot-save-path DIR"),
                   ks_http_respond_error(h, r->conn, &err);
        if (!(name = body_filename(r, &err))) return ks_http_respond_error(h, r->conn, &err);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        struct stat st;
        if (act == KS_SLOT_RESTORE && stat(path, &st) != 0) {
            ks_api_fail(&err, 404, "invalid_request_error", "file_not_found", "filename",
                        "no saved state '%s' in the slot save folder", name);
            free(name);
            return ks_http_respond_error(h, r->conn, &err);
        }
    }
    s = ks_engine_slot(h->engine, act, slot, path, &res);
    if (s) {
        ks_api_fail(&err, s == KILN_E_UNSUPPORTED && res.error[0] == 0 ? 501 : http_status(s),
                    http_status(s) >= 500 ? "server_error" : "invalid_request_error", kiln_status_name(s),
                    NULL, "%s", kiln_last_error());
        free(name);
        return ks_http_respond_error(h, r->conn, &err);
    }
    char *body = answer(act, slot, name, &res);
    free(name);
    return ks_http_respond(r->conn, 200, "application/json", body, NULL, NULL);
}
