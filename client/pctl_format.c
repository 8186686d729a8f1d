/* pctl_format.c: names and human/JSON renderings shared by pctl's commands.
 *
 * JSON objects use the proto field names (snake case) with job states as
 * lower-case words ("running", "completed"), so scripts can read them with
 * any JSON parser. Pure functions; no RPC here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobcfg.h"
#include "jobspec.h"
#include "pctl.h"

#define ESC_SLOTS 16

const char *pctl_esc(const char *s)
{
    static char *slot[ESC_SLOTS];
    static unsigned next;
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    size_t n = strlen((const char *)p), o = 0;
    char *out = malloc(4 * n + 1); /* every byte at most \xNN */

    if (!out)
        return "(out of memory)";
    int cont = 0; /* continuation bytes the last UTF-8 lead byte announced */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c == 0xc2 && i + 1 < n && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f) {
            o += (size_t)sprintf(out + o, "\\x%02x\\x%02x", c, p[i + 1]); /* UTF-8 C1 */
            i++;
            cont = 0;
        } else if (c >= 0x80 && c <= 0xbf && cont > 0) {
            out[o++] = (char)c; /* inside a UTF-8 character (the 0x82 of U+20AC) */
            cont--;
        } else if (c == '\n' || c == '\t' || c == '\r') {
            out[o++] = '\\';
            out[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
            cont = 0;
        } else if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0x9f)) {
            o += (size_t)sprintf(out + o, "\\x%02x", c); /* C0, DEL, a lone C1 byte */
            cont = 0;
        } else {
            out[o++] = (char)c;
            cont = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
        }
    }
    out[o] = '\0';
    free(slot[next]);
    slot[next] = out;
    next = (next + 1) % ESC_SLOTS;
    return out;
}

int pctl_esc_write(FILE *f, const uint8_t *p, size_t len)
{
    char buf[4096 + 16];
    size_t o = 0;
    int cont = 0; /* continuation bytes the last UTF-8 lead byte announced */

    for (size_t i = 0; i < len; i++) {
        unsigned char c = p[i];
        if (c == 0xc2 && i + 1 < len && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f) {
            o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\\x%02x\\x%02x", c, p[i + 1]);
            i++; /* UTF-8 C1 */
            cont = 0;
        } else if (c >= 0x80 && c <= 0xbf && cont > 0) {
            buf[o++] = (char)c; /* inside a UTF-8 character (the 0x82 of U+20AC) */
            cont--;
        } else if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f && !(c >= 0x80 && c <= 0x9f))) {
            buf[o++] = (char)c;
            cont = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
        } else {
            cont = 0;
            o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\\x%02x", c);
        }
        if (o >= 4096) {
            if (fwrite(buf, 1, o, f) != o)
                return -1;
            o = 0;
        }
    }
    return o && fwrite(buf, 1, o, f) != o ? -1 : 0;
}

const char *pctl_code_name(grpc_status_code code)
{
    switch (code) {
    case GRPC_STATUS_OK: return "OK";
    case GRPC_STATUS_CANCELLED: return "CANCELLED";
    case GRPC_STATUS_UNKNOWN: return "UNKNOWN";
    case GRPC_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case GRPC_STATUS_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case GRPC_STATUS_NOT_FOUND: return "NOT_FOUND";
    case GRPC_STATUS_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case GRPC_STATUS_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case GRPC_STATUS_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case GRPC_STATUS_ABORTED: return "ABORTED";
    case GRPC_STATUS_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case GRPC_STATUS_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case GRPC_STATUS_INTERNAL: return "INTERNAL";
    case GRPC_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case GRPC_STATUS_DATA_LOSS: return "DATA_LOSS";
    case GRPC_STATUS_UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
    }
}

const char *pctl_state_name(Parallax__V1__JobState state)
{
    switch (state) {
    case PARALLAX__V1__JOB_STATE__JOB_PENDING: return "pending";
    case PARALLAX__V1__JOB_STATE__JOB_STARTING: return "starting";
    case PARALLAX__V1__JOB_STATE__JOB_RUNNING: return "running";
    case PARALLAX__V1__JOB_STATE__JOB_COMPLETED: return "completed";
    case PARALLAX__V1__JOB_STATE__JOB_FAILED: return "failed";
    case PARALLAX__V1__JOB_STATE__JOB_CANCELLED: return "cancelled";
    default: return "unspecified";
    }
}

int pctl_state_is_final(Parallax__V1__JobState state)
{
    return state == PARALLAX__V1__JOB_STATE__JOB_COMPLETED ||
           state == PARALLAX__V1__JOB_STATE__JOB_FAILED ||
           state == PARALLAX__V1__JOB_STATE__JOB_CANCELLED;
}

const char *pctl_fmt_duration(double s, char *buf, size_t len)
{
    long t;
    if (!isfinite(s) || s < 0) {
        snprintf(buf, len, "-");
        return buf;
    }
    t = lround(s);
    if (t < 60)
        snprintf(buf, len, "%lds", t);
    else if (t < 3600)
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, len, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
    else
        snprintf(buf, len, "%ldd%02ldh", t / 86400, (t % 86400) / 3600);
    return buf;
}

const char *pctl_fmt_rate(double v, char *buf, size_t len)
{
    if (!isfinite(v) || v <= 0)
        snprintf(buf, len, "-");
    else if (v >= 1e9)
        snprintf(buf, len, "%.1fG", v / 1e9);
    else if (v >= 1e6)
        snprintf(buf, len, "%.1fM", v / 1e6);
    else if (v >= 1e3)
        snprintf(buf, len, "%.1fk", v / 1e3);
    else
        snprintf(buf, len, "%.0f", v);
    return buf;
}

static json_t *json_str(const char *s)
{
    return json_string(s ? s : "");
}

/* A float as the shortest decimal that reads back to it (0.1f -> 0.1, not
 * 0.100000001). */
json_t *pctl_json_float(float f)
{
    char buf[32];
    if (!isfinite(f))
        return json_null();
    snprintf(buf, sizeof(buf), "%.9g", (double)f);
    for (int prec = 6; prec < 9; prec++) {
        char tmp[32];
        snprintf(tmp, sizeof(tmp), "%.*g", prec, (double)f);
        if (strtof(tmp, NULL) == f) {
            memcpy(buf, tmp, sizeof(tmp));
            break;
        }
    }
    return json_real(strtod(buf, NULL));
}

int pctl_job_layout(const Parallax__V1__Job *job, px_layout_t *l)
{
    if (!job->spec)
        return 0;
    px_jobspec_layout(job->spec, l);
    return px_layout_check(l, NULL, 0) == PX_OK;
}

json_t *pctl_json_job(const Parallax__V1__Job *job)
{
    json_t *o = json_object(), *ranks = json_array(), *spec = json_object();
    const Parallax__V1__JobSpec *sp = job->spec;
    px_layout_t l;
    int has_layout = pctl_job_layout(job, &l);
    int reporting = has_layout ? px_layout_reporting_rank(&l) : -1;

    json_object_set_new(o, "id", json_str(job->id));
    json_object_set_new(o, "name", json_str(sp ? sp->name : ""));
    json_object_set_new(o, "state", json_string(pctl_state_name(job->state)));
    json_object_set_new(o, "reason", json_str(job->reason));
    json_object_set_new(o, "step", json_integer(job->step));
    json_object_set_new(o, "steps", json_integer(sp ? sp->steps : 0));
    json_object_set_new(o, "loss", pctl_json_float(job->loss));
    json_object_set_new(o, "tokens_per_second", json_real(job->tokens_per_second));
    json_object_set_new(o, "grad_norm", pctl_json_float(job->grad_norm));
    json_object_set_new(o, "lr", pctl_json_float(job->lr));
    json_object_set_new(o, "val_loss", job->val_step ? pctl_json_float(job->val_loss) : json_null());
    json_object_set_new(o, "val_step", json_integer(job->val_step));
    json_object_set_new(o, "created_ms", json_integer(job->created_ms));
    json_object_set_new(o, "now_ms", json_integer(job->now_ms)); /* the clock of its times */
    json_object_set_new(o, "started_ms", json_integer(job->started_ms));
    json_object_set_new(o, "finished_ms", json_integer(job->finished_ms));
    json_object_set_new(o, "coordinator", json_str(job->coordinator));
    if (sp) {
        /* every field of the spec, from the descriptor (model and parallel
         * nested as on the wire), then, as before, the model's sizes at the
         * top (vocab resolved) and the resolved layout with its world */
        const Parallax__V1__ModelSpec *m = sp->model;
        json_decref(spec);
        spec = pctl_json_message(&sp->base);
        json_object_set_new(spec, "layers", json_integer(m ? m->layers : 0));
        json_object_set_new(spec, "heads", json_integer(m ? m->heads : 0));
        json_object_set_new(spec, "dim", json_integer(m ? m->dim : 0));
        json_object_set_new(spec, "seq", json_integer(m ? m->seq : 0));
        json_object_set_new(spec, "vocab", json_integer(m && m->vocab ? m->vocab : PX_DEFAULT_VOCAB));
        if (has_layout) {
            json_t *par = json_object_get(spec, "parallel");
            if (!json_is_object(par)) {
                par = json_object();
                json_object_set_new(spec, "parallel", par);
            }
            json_t *resolved = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "dp", l.dp, "tp",
                                         l.tp, "pp", l.pp, "cp", l.cp, "ep", l.ep, "world",
                                         px_layout_world(&l));
            json_object_update(par, resolved);
            json_decref(resolved);
        }
    }
    json_object_set_new(o, "spec", spec);
    for (size_t i = 0; i < job->n_ranks; i++) {
        const Parallax__V1__RankInfo *r = job->ranks[i];
        json_t *jr = json_object();
        json_object_set_new(jr, "rank", json_integer(r->rank));
        json_object_set_new(jr, "node", json_str(r->node));
        json_object_set_new(jr, "device", json_str(r->device));
        json_object_set_new(jr, "pid", json_integer(r->pid));
        json_object_set_new(jr, "state", json_str(r->state));
        json_object_set_new(jr, "exit_code", json_integer(r->exit_code));
        if (has_layout && (int)r->rank < px_layout_world(&l)) {
            px_coord_t c;
            px_layout_coord(&l, (int)r->rank, &c);
            json_object_set_new(jr, "coord",
                                json_pack("{s:i, s:i, s:i, s:i, s:i}", "dp", c.dp, "tp", c.tp,
                                          "pp", c.pp, "cp", c.cp, "ep", c.ep));
            json_object_set_new(jr, "reporting", json_boolean((int)r->rank == reporting));
        }
        json_array_append_new(ranks, jr);
    }
    json_object_set_new(o, "ranks", ranks);
    if (has_layout)
        json_object_set_new(o, "reporting_rank", json_integer(reporting));
    return o;
}

json_t *pctl_json_metrics(const Parallax__V1__StepMetrics *m)
{
    json_t *o = json_object();
    json_object_set_new(o, "step", json_integer(m->step));
    json_object_set_new(o, "loss", pctl_json_float(m->loss));
    json_object_set_new(o, "grad_norm", pctl_json_float(m->grad_norm));
    json_object_set_new(o, "lr", pctl_json_float(m->lr));
    json_object_set_new(o, "tokens_per_second", json_real(m->tokens_per_second));
    json_object_set_new(o, "elapsed_s", json_real(m->elapsed_s));
    json_object_set_new(o, "time_ms", json_integer(m->time_ms));
    /* null on the steps not followed by a validation */
    json_object_set_new(o, "val_loss", m->val_loss > 0.0f ? pctl_json_float(m->val_loss) : json_null());
    if (m->mfu > 0) /* absent where the ranks knew no device peak */
        json_object_set_new(o, "mfu", json_real(m->mfu));
    return o;
}

json_t *pctl_json_node(const Parallax__V1__NodeInfo *n)
{
    json_t *o = json_object(), *devs = json_array();
    size_t free_devs = 0;
    for (size_t i = 0; i < n->n_devices; i++) {
        json_t *d = json_object();
        json_object_set_new(d, "name", json_str(n->devices[i]->name));
        json_object_set_new(d, "job_id", json_str(n->devices[i]->job_id));
        if (n->devices[i]->name && (!strncmp(n->devices[i]->name, "cuda:", 5) ||
                                    !strncmp(n->devices[i]->name, "sim:", 4))) { /* GPU, sim */
            json_object_set_new(d, "mem_total", json_integer((json_int_t)n->devices[i]->memory_bytes));
            json_object_set_new(d, "mem_used", json_integer((json_int_t)n->devices[i]->mem_used));
        }
        if (n->devices[i]->blocked && *n->devices[i]->blocked) /* not handed out now */
            json_object_set_new(d, "blocked", json_str(n->devices[i]->blocked));
        json_array_append_new(devs, d);
        if (!n->devices[i]->job_id || !*n->devices[i]->job_id)
            free_devs++;
    }
    json_t *gpus = json_array();
    for (size_t i = 0; i < n->n_gpus; i++) { /* NVML's last sample of each GPU */
        const Parallax__V1__GpuStats *g = n->gpus[i];
        json_t *o = json_object(), *pids = json_array(), *foreign = json_array();
        json_object_set_new(o, "device", json_str(g->device));
        json_object_set_new(o, "model", json_str(g->model));
        json_object_set_new(o, "memory_total", json_integer((json_int_t)g->memory_total));
        json_object_set_new(o, "memory_used", json_integer((json_int_t)g->memory_used));
        /* null: the GPU does not report it */
        json_object_set_new(o, "utilization", g->utilization >= 0 ? json_real(g->utilization) : json_null());
        json_object_set_new(o, "power_watts", g->power_watts >= 0 ? json_real(g->power_watts) : json_null());
        json_object_set_new(o, "temperature_celsius",
                            g->temperature_celsius >= 0 ? json_real(g->temperature_celsius) : json_null());
        json_object_set_new(o, "sampled_ms", json_integer(g->sampled_ms));
        for (size_t k = 0; k < g->n_pids; k++)
            json_array_append_new(pids, json_integer(g->pids[k]));
        for (size_t k = 0; k < g->n_foreign_pids; k++)
            json_array_append_new(foreign, json_integer(g->foreign_pids[k]));
        json_object_set_new(o, "pids", pids);
        json_object_set_new(o, "foreign_pids", foreign);
        json_array_append_new(gpus, o);
    }
    json_object_set_new(o, "name", json_str(n->name));
    json_object_set_new(o, "control_addr", json_str(n->control_addr));
    json_object_set_new(o, "peer_addr", json_str(n->peer_addr));
    json_object_set_new(o, "alive", json_boolean(n->alive));
    json_object_set_new(o, "draining", json_boolean(n->draining));
    json_object_set_new(o, "state", json_str(n->state && *n->state ? n->state
                                             : n->alive ? "UP" : "DOWN"));
    json_object_set_new(o, "last_seen_ms", json_integer(n->last_seen_ms));
    json_object_set_new(o, "version", json_str(n->version));
    json_object_set_new(o, "blas_core", json_str(n->blas_core));
    json_object_set_new(o, "blas_core_source", json_str(n->blas_core_source));
    json_object_set_new(o, "devices_free", json_integer((json_int_t)free_devs));
    json_object_set_new(o, "devices_total", json_integer((json_int_t)n->n_devices));
    json_object_set_new(o, "devices", devs);
    json_object_set_new(o, "gpus", gpus);
    json_object_set_new(o, "error", json_str(n->error));
    json_object_set_new(o, "now_ms", json_integer(n->now_ms)); /* last_seen_ms's clock */
    return o;
}

int pctl_json_print(json_t *value)
{
    int ret;
    if (!value) {
        fprintf(stderr, "pctl: out of memory building JSON\n");
        return PCTL_EXIT_FAIL;
    }
    ret = json_dumpf(value, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    json_decref(value);
    fputc('\n', stdout);
    return ret == 0 ? PCTL_EXIT_OK : PCTL_EXIT_FAIL;
}
