/* auth.c: parallaxd's cluster token and TLS settings (issue 5, security).
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
 * about the expected token is revealed. Main (loop) thread only. */
#include "daemon.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "px_log.h"
#include "px_sha256.h"

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

/* UNAUTHENTICATED unless the call carries the daemon's token. */
static grpc_status_code check_token(px_daemon_t *d, px_rpc_call_t *call, const char *path,
                                    char *why, size_t why_len)
{
    const char *v = NULL;
    size_t len = 0;

    if (!px_rpc_call_metadata(call, PX_AUTH_MD_KEY, &v, &len)) {
        snprintf(why, why_len, "%s needs the cluster token (metadata %s; pctl --token-file)",
                 path, PX_AUTH_MD_KEY);
        px_warn("refused %s from %s: no cluster token", path, px_rpc_call_peer(call));
        return GRPC_STATUS_UNAUTHENTICATED;
    }
    if (!px_rpc_secret_equal(v, len, d->token, d->token_len)) {
        snprintf(why, why_len, "%s: wrong cluster token", path);
        px_warn("refused %s from %s: wrong cluster token", path, px_rpc_call_peer(call));
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

px_status_t px_auth_channel_create(px_daemon_t *d, const char *target, int peer_plane,
                                   px_rpc_channel_t **channel_p)
{
    px_rpc_channel_t *ch;
    px_status_t status;

    PX_CHECK(px_rpc_channel_create_tls(target, peer_plane ? px_auth_ca_file(d) : NULL, &ch));
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
