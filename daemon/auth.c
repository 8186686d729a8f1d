/* auth.c: parallaxd's cluster token and TLS settings (security).
 *
 * The cluster token is a shared secret read once at start from
 * `token-file` (first line, surrounding whitespace trimmed; the file must not
 * be readable or writable by others, as ssh and munge demand of their keys).
 * It travels as the request metadata "x-parallax-token" (PX_AUTH_MD_KEY).
 *
 * Who must present it:
 *  - every call to the Peer service (daemon to daemon, and rank to its
 *    coordinator: the daemon gives its ranks the token in the environment
 *    variable PX_CLUSTER_TOKEN of the rank process only, never on the
 *    command line, where ps would show it);
 *  - Control calls that do not come over the unix socket or a loopback
 *    address. Local callers are already limited by the socket's mode 0660
 *    and group (unix) or by running on the node (loopback), as with
 *    slurmctld's local munge socket; a remote pctl passes --token-file.
 * grpc.health.v1 stays open (load balancers and probes carry no token);
 * unknown methods are UNIMPLEMENTED whatever the token.
 *
 * Each job's ranks also get a secret of their own, PX_JOB_SECRET, derived
 * from the token and the job id (px_auth_job_secret): they prove it to each
 * other at their world's wire-up (px_transport.h), so a rank of another job,
 * or a stranger, is refused on the rank plane; the token itself stays off it.
 *
 * The comparison is constant-time (px_rpc_secret_equal). A missing or wrong
 * token ends the call UNAUTHENTICATED with a message saying which; nothing
 * about the expected token is revealed; each is logged with the caller.
 *
 * Guessing is rate-limited per source address (the gRPC peer without its
 * port; a table of PXD_AUTH_SOURCES, the stalest unlocked one reused): after
 * cfg.auth_max_wrong wrong tokens within cfg.auth_lockout_ms, every call from
 * that address that needs the token is refused RESOURCE_EXHAUSTED for
 * auth_lockout_ms without its token being compared (one log line when the
 * lockout starts, one with the count when a call finds it over), so a guesser
 * learns nothing more in that time. The right token does not lift it: a
 * correct answer would tell the guesser it guessed (sshd's per-source
 * penalties and fail2ban cut a source off the same way, with the same cost:
 * honest callers behind that address wait too). A call without a token is
 * not a guess and is not counted. Main (loop) thread only. */
#include "daemon.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "px_env.h"
#include "px_log.h"
#include "px_sha256.h"
#include "px_time.h"

/* Longest token accepted (bytes). */
#define PX_AUTH_TOKEN_MAX 4096

px_status_t px_auth_load_token(const char *path, char **token_p)
{
    struct stat st;
    char *text, *start, *end;

    if (stat(path, &st) != 0) {
        px_error("token-file %s: %s", path, strerror(errno));
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (!S_ISREG(st.st_mode)) {
        px_error("token-file %s: not a regular file", path);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (st.st_mode & (S_IROTH | S_IWOTH)) {
        px_error("token-file %s: mode %04o lets other users read or write it; "
                 "chmod 0600 (or 0640 for the service group)",
                 path, (unsigned)(st.st_mode & 07777));
        return PX_ERR_INVALID_ARGUMENT;
    }
    text = px_rpc_read_file(path, PX_AUTH_TOKEN_MAX);
    if (!text) {
        px_error("token-file %s: cannot read: %s", path,
                 errno == EFBIG ? "larger than 4096 bytes" : strerror(errno));
        return PX_ERR_INVALID_ARGUMENT;
    }
    start = text;
    while (*start == ' ' || *start == '\t' || *start == '\r' || *start == '\n')
        start++;
    end = start;
    while (*end && *end != '\n' && *end != '\r')
        end++;
    while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (end == start) {
        px_error("token-file %s: empty (write one line of random text, e.g. "
                 "openssl rand -hex 32)", path);
        free(text);
        return PX_ERR_INVALID_ARGUMENT;
    }
    for (const char *p = start; p < end; p++) {
        if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) {
            px_error("token-file %s: the token must be printable ASCII (it travels as a "
                     "gRPC metadata value)", path);
            explicit_bzero(text, strlen(text));
            free(text);
            return PX_ERR_INVALID_ARGUMENT;
        }
    }
    memmove(text, start, (size_t)(end - start));
    text[end - start] = '\0';
    *token_p = text;
    return PX_OK;
}

/* The source address of a gRPC peer string: "ipv4:10.0.0.2:41234" ->
 * "ipv4:10.0.0.2", "ipv6:[fd00::2]:5000" -> "ipv6:[fd00::2]"; "unix:..."
 * as it is. */
static void source_addr(const char *peer, char *out, size_t len)
{
    const char *colon = strrchr(peer, ':');
    size_t n = strlen(peer);

    if (strncmp(peer, "unix:", 5) && colon && colon[1] && strspn(colon + 1, "0123456789") ==
                                                              strlen(colon + 1))
        n = (size_t)(colon - peer);
    if (n >= len)
        n = len - 1;
    memcpy(out, peer, n);
    out[n] = '\0';
}

/* The table entry of `addr`; with `make`, a new one (reusing the stalest
 * entry not locked, else the stalest) when it has none; else NULL. */
static px_auth_source_t *source_find(px_daemon_t *d, const char *addr, int make, int64_t now)
{
    px_auth_source_t *free_slot = NULL, *stale = NULL, *stale_any = NULL;

    for (int i = 0; i < PXD_AUTH_SOURCES; i++) {
        px_auth_source_t *s = &d->auth_sources[i];
        if (!s->addr[0]) {
            if (!free_slot)
                free_slot = s;
            continue;
        }
        if (!strcmp(s->addr, addr))
            return s;
        if (!stale_any || s->last_ms < stale_any->last_ms)
            stale_any = s;
        if (s->locked_until_ms <= now && (!stale || s->last_ms < stale->last_ms))
            stale = s;
    }
    if (!make)
        return NULL;
    px_auth_source_t *s = free_slot ? free_slot : stale ? stale : stale_any;
    memset(s, 0, sizeof(*s));
    snprintf(s->addr, sizeof(s->addr), "%s", addr);
    return s;
}

/* Counts a wrong token from `addr`; starts its lockout at the limit. */
static void source_wrong(px_daemon_t *d, const char *addr, int64_t now)
{
    px_auth_source_t *s = source_find(d, addr, 1, now);
    long window = d->cfg.auth_lockout_ms;

    if (s->wrong == 0 || now - s->first_ms > window) {
        s->wrong = 0;
        s->first_ms = now;
    }
    s->wrong++;
    s->last_ms = now;
    if (s->wrong >= d->cfg.auth_max_wrong) {
        px_warn("%s sent %d wrong cluster tokens in %.1f s: its calls are refused for %.1f s "
                "(auth-max-wrong, auth-lockout-ms)", addr, s->wrong,
                (double)(now - s->first_ms) / 1e3, (double)window / 1e3);
        s->locked_until_ms = now + window;
        s->refused = 0;
        s->wrong = 0;
    }
}

/* UNAUTHENTICATED unless the call carries the daemon's token;
 * RESOURCE_EXHAUSTED while its source address is locked out. */
static grpc_status_code check_token(px_daemon_t *d, px_rpc_call_t *call, const char *path,
                                    char *why, size_t why_len)
{
    const char *v = NULL;
    size_t len = 0;
    char addr[PXD_AUTH_ADDR_MAX];
    int64_t now = px_time_mono_ms();
    int limit = d->cfg.auth_max_wrong > 0;
    px_auth_source_t *s;

    source_addr(px_rpc_call_peer(call), addr, sizeof(addr));
    s = limit ? source_find(d, addr, 0, now) : NULL;
    if (s && s->locked_until_ms > now) {
        s->refused++;
        s->last_ms = now;
        snprintf(why, why_len, "%s: too many wrong cluster tokens from %s; refused for "
                 "another %.1f s", path, addr, (double)(s->locked_until_ms - now) / 1e3);
        px_debug("refused %s from %s: locked out (%ld calls refused so far)", path, addr,
                 s->refused);
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    if (s && s->locked_until_ms && s->locked_until_ms <= now) {
        px_info("%s: lockout over (%ld calls refused during it)", addr, s->refused);
        s->locked_until_ms = 0;
        s->refused = 0;
    }
    if (!px_rpc_call_metadata(call, PX_AUTH_MD_KEY, &v, &len)) {
        snprintf(why, why_len, "%s needs the cluster token (metadata %s; pctl --token-file)",
                 path, PX_AUTH_MD_KEY);
        px_warn("refused %s from %s: no cluster token", path, px_rpc_call_peer(call));
        return GRPC_STATUS_UNAUTHENTICATED;
    }
    if (!px_rpc_secret_equal(v, len, d->token, d->token_len)) {
        snprintf(why, why_len, "%s: wrong cluster token", path);
        px_warn("refused %s from %s: wrong cluster token", path, px_rpc_call_peer(call));
        if (limit)
            source_wrong(d, addr, now);
        return GRPC_STATUS_UNAUTHENTICATED;
    }
    return GRPC_STATUS_OK;
}

grpc_status_code px_auth_peer_call(px_rpc_call_t *call, const char *path, void *arg, char *why,
                                   size_t why_len)
{
    px_daemon_t *d = arg;
    if (!d->token)
        return GRPC_STATUS_OK;
    return check_token(d, call, path, why, why_len);
}

grpc_status_code px_auth_control_call(px_rpc_call_t *call, const char *path, void *arg,
                                      char *why, size_t why_len)
{
    px_daemon_t *d = arg;
    if (!d->token || px_rpc_call_peer_is_local(call))
        return GRPC_STATUS_OK;
    return check_token(d, call, path, why, why_len);
}

/* The wait between connection attempts of a channel to another daemon,
 * ms: the heartbeat period, as px_nodes_start clamps it. */
static int reconnect_ms(void)
{
    long period = px_env_int("PX_HEARTBEAT_MS");
    return period < 10 ? 10 : (int)period;
}

px_status_t px_auth_channel_create(px_daemon_t *d, const char *target, int peer_plane,
                                   px_rpc_channel_t **channel_p)
{
    px_rpc_channel_t *ch;
    px_status_t status;

    /* a peer retried every heartbeat period: back within one period of
     * its restart, however long it was down; a peer connection closed
     * when idle (membership probes each member once a round: fds do not
     * grow with the cluster) */
    PX_CHECK(px_rpc_channel_create_ex(target, peer_plane ? px_auth_ca_file(d) : NULL,
                                      reconnect_ms(), peer_plane ? PXD_PEER_IDLE_MS : 0, &ch));
    if (d->token) {
        status = px_rpc_channel_set_metadata(ch, PX_AUTH_MD_KEY, d->token);
        if (status != PX_OK) {
            px_rpc_channel_destroy(ch);
            return status;
        }
    }
    *channel_p = ch;
    return PX_OK;
}

const char *px_auth_ca_file(const px_daemon_t *d)
{
    if (d->cfg.tls_ca_file)
        return d->cfg.tls_ca_file;
    return d->cfg.tls_cert_file; /* a self-signed cluster certificate is its own CA */
}

int px_auth_job_secret(const px_daemon_t *d, const char *job_id, char *hex, size_t len)
{
    static const char label[] = "parallax job secret ";
    uint8_t mac[PX_SHA256_BYTES];
    char msg[sizeof(label) + 256];
    int n;

    if (!d->token || !job_id || len < 2 * PX_SHA256_BYTES + 1)
        return -1;
    n = snprintf(msg, sizeof(msg), "%s%s", label, job_id);
    if (n < 0 || (size_t)n >= sizeof(msg))
        return -1;
    px_hmac_sha256(d->token, strlen(d->token), msg, (size_t)n, mac);
    for (int i = 0; i < PX_SHA256_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    explicit_bzero(mac, sizeof(mac));
    return 0;
}
