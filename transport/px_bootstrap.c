/* px_bootstrap.c: standalone bootstrap over TCP (torchrun / srun style).
 *
 * Setup (deadline PX_CONNECT_TIMEOUT_MS): rank 0 listens on PX_MASTER_PORT;
 * every other rank connects (retrying while refused). Rank 0 sends each
 * connection a challenge
 *   { u32 challenge magic, 16 random bytes (nonce) }
 * and the rank answers with
 *   hello = { u32 magic, i32 rank, i32 world, u32 addr_len, u32 node_len }
 *           proof (32 bytes), addr bytes, node bytes      (big-endian ints)
 * where proof = HMAC-SHA256(job secret, nonce || the 20 hello bytes): the
 * job secret (PX_JOB_SECRET; the daemon derives one per job from its
 * cluster token; empty when unset) is proven without being sent. A
 * connection whose hello does not come within HELLO_MS, has not the magic,
 * or whose proof is wrong is refused (closed, logged with its address) and
 * setup goes on waiting for the real ranks: a stranger on the port (a port
 * scanner, another job's rank, a rogue) can neither take a rank's place nor
 * stall or crash the job. Rank 0 judges up to MAX_PENDING connections at
 * once (one poll), so a silent one delays nobody. An authenticated hello that disagrees (world
 * size, a rank twice) fails setup, as a configuration error.
 * Rank 0 answers each with the whole table, rank by rank:
 *   { u32 addr_len, u32 node_len } addr bytes, node bytes
 * followed by a PX_WATCH_HUP_RANK(0) watch record (px_transport.h), so a
 * communicator that polls the socket blames rank 0 when it hangs up.
 *
 * Life (the connections stay open): non-zero ranks hand their socket to the
 * communicator as the watch fd. Rank 0 runs one thread that sleeps in poll()
 * on all sockets; when a socket closes without a prior PX_BOOT_BYE record,
 * that rank died: the thread writes PX_WATCH_DIED(R) to every other rank and
 * to a pipe whose read end is rank 0's own watch fd. Clean close: every
 * non-zero rank sends PX_BOOT_BYE then closes; rank 0 waits (bounded) for all
 * byes before closing, so nobody sees a hang-up while others still work.
 *
 * Threads: the caller's thread, plus rank 0's watcher thread, which only
 * touches the sockets, the pipe and its own arrays; destroy stops it through
 * a second pipe and joins it before closing anything. */
#include "px_bootstrap.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "px_env.h"
#include "px_log.h"
#include "px_sha256.h"
#include "px_time.h"

#define HELLO_MAGIC 0x50584253u /* "PXBS" */
#define CHALLENGE_MAGIC 0x50584348u /* "PXCH" */
#define NONCE_BYTES 16
#define HELLO_BYTES 20
/* Bound (ms) of a hello after the connection is accepted: the ranks send it
 * at once; a connection silent this long is not one of them. */
#define HELLO_MS 3000
/* Connections rank 0 judges at once; more wait in the listen backlog. */
#define MAX_PENDING 64
#define PX_BOOT_BYE 0x42594500u /* record kind: clean exit of the sender */
#define MAX_ADDR (1u << 20)
#define MAX_NODE 256u

struct px_bootstrap {
    int rank;
    int world;
    int *socks;        /* rank 0: socks[r] to rank r (r >= 1); others: socks[0] */
    int watch_fd;      /* handed to the communicator */
    int died_pipe[2];  /* rank 0: watcher -> own comm */
    int stop_pipe[2];  /* rank 0: destroy -> watcher */
    pthread_t thread;
    int thread_started;
    int *bye;          /* rank 0: bye[r] seen */
    int *closed;       /* rank 0: socks[r] hung up */
    pthread_mutex_t lock;
    pthread_cond_t cond; /* rank 0: bye / closed changed */
};

static px_status_t env_int(const char *name, int def, int min, int max, int *out)
{
    const char *v = getenv(name);
    char *end;
    long x;
    if (!v || !*v) {
        if (def < min) {
            px_error("bootstrap: %s is not set", name);
            return PX_ERR_INVALID_ARGUMENT;
        }
        *out = def;
        return PX_OK;
    }
    x = strtol(v, &end, 10);
    if (*end || x < min || x > max) {
        px_error("bootstrap: %s=%s is not an integer in [%d, %d]", name, v, min, max);
        return PX_ERR_INVALID_ARGUMENT;
    }
    *out = (int)x;
    return PX_OK;
}

px_status_t px_bootstrap_from_env(int *rank_p, int *world_p)
{
    int rank, world, port;
    px_status_t status;

    status = env_int("PX_WORLD_SIZE", -1, 1, 1 << 18, &world);
    if (status != PX_OK)
        return status;
    status = env_int("PX_RANK", -1, 0, world - 1, &rank);
    if (status != PX_OK)
        return status;
    if (world > 1) {
        status = env_int("PX_MASTER_PORT", -1, 1, 65535, &port);
        if (status != PX_OK)
            return status;
    }
    *rank_p = rank;
    *world_p = world;
    return PX_OK;
}

static void node_name(char *buf, size_t len)
{
    const char *v = getenv("PX_NODE");
    if (v && *v) {
        snprintf(buf, len, "%s", v);
        return;
    }
    if (gethostname(buf, len) != 0)
        snprintf(buf, len, "localhost");
    buf[len - 1] = '\0';
}

/* Writes all of buf (blocking socket). */
static px_status_t write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
        if (w < 0 && errno == ENOTSOCK)
            w = write(fd, p, len); /* rank 0's pipe */
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return PX_ERR_IO;
        p += w;
        len -= (size_t)w;
    }
    return PX_OK;
}

/* Reads exactly len bytes before `deadline` (ms, monotonic). */
static px_status_t read_all(int fd, void *buf, size_t len, int64_t deadline)
{
    char *p = buf;
    while (len) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int64_t left = deadline - px_time_mono_ms();
        ssize_t got;
        if (left <= 0)
            return PX_ERR_TIMEOUT;
        if (poll(&pfd, 1, (int)left) <= 0)
            continue;
        got = recv(fd, p, len, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return PX_ERR_IO;
        p += got;
        len -= (size_t)got;
    }
    return PX_OK;
}

/* The job secret (borrowed from the environment; "" when unset). Read
 * with getenv, not the knob table: --print-config must not print it. */
static const char *job_secret(void)
{
    const char *v = getenv("PX_JOB_SECRET");
    return v ? v : "";
}

/* proof = HMAC-SHA256(secret, nonce || hello). */
static void hello_proof(const unsigned char *nonce, const unsigned char *hello,
                        unsigned char proof[PX_SHA256_BYTES])
{
    unsigned char msg[NONCE_BYTES + HELLO_BYTES];
    const char *secret = job_secret();

    memcpy(msg, nonce, NONCE_BYTES);
    memcpy(msg + NONCE_BYTES, hello, HELLO_BYTES);
    px_hmac_sha256(secret, strlen(secret), msg, sizeof(msg), proof);
}

/* 16 unpredictable bytes (getrandom; /dev/urandom's pool). */
static px_status_t make_nonce(unsigned char nonce[NONCE_BYTES])
{
    size_t have = 0;
    while (have < NONCE_BYTES) {
        ssize_t got = getrandom(nonce + have, NONCE_BYTES - have, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return PX_ERR_IO;
        have += (size_t)got;
    }
    return PX_OK;
}

/* "a.b.c.d:port" of the connection's peer, for the refusal's log line. */
static void peer_name(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[64] = "?";
    int port = 0;

    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
            port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
            port = ntohs(a->sin6_port);
        }
    }
    snprintf(buf, len, "%s:%d", host, port);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return ntohl(v);
}

static px_status_t send_record(int fd, uint32_t kind, int32_t rank)
{
    unsigned char rec[8];
    put_u32(rec, kind);
    put_u32(rec + 4, (uint32_t)rank);
    return write_all(fd, rec, sizeof(rec));
}

/* --- rank 0 watcher thread --- */

static void *watcher_main(void *arg)
{
    px_bootstrap_t *bs = arg;
    int n = bs->world;
    struct pollfd *fds = calloc((size_t)n + 1, sizeof(*fds));
    unsigned char (*buf)[8] = calloc((size_t)n, 8);
    size_t *have = calloc((size_t)n, sizeof(size_t));
    int *map = calloc((size_t)n + 1, sizeof(int));

    if (!fds || !buf || !have || !map) {
        px_error("bootstrap watcher: out of memory");
        goto out;
    }
    for (;;) {
        nfds_t k = 0;
        fds[k].fd = bs->stop_pipe[0];
        fds[k].events = POLLIN;
        map[k++] = -1;
        for (int r = 1; r < n; r++) {
            if (bs->closed[r])
                continue;
            fds[k].fd = bs->socks[r];
            fds[k].events = POLLIN;
            map[k++] = r;
        }
        if (poll(fds, k, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (fds[0].revents)
            break;
        for (nfds_t i = 1; i < k; i++) {
            int r = map[i];
            ssize_t got;
            if (!fds[i].revents)
                continue;
            got = recv(bs->socks[r], buf[r] + have[r], 8 - have[r], MSG_DONTWAIT);
            if (got < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            pthread_mutex_lock(&bs->lock);
            if (got > 0) {
                have[r] += (size_t)got;
                if (have[r] == 8) {
                    have[r] = 0;
                    if (get_u32(buf[r]) == PX_BOOT_BYE)
                        bs->bye[r] = 1;
                }
            } else {
                /* hang-up */
                bs->closed[r] = 1;
                if (!bs->bye[r]) {
                    px_warn("bootstrap: rank %d died (its connection closed); telling the others",
                            r);
                    for (int o = 1; o < n; o++)
                        if (o != r && !bs->closed[o])
                            send_record(bs->socks[o], PX_WATCH_DIED, r);
                    send_record(bs->died_pipe[1], PX_WATCH_DIED, r);
                }
            }
            pthread_cond_broadcast(&bs->cond);
            pthread_mutex_unlock(&bs->lock);
        }
    }
out:
    free(fds);
    free(buf);
    free(have);
    free(map);
    return NULL;
}

/* --- setup --- */

static px_status_t table_put(px_addr_table_t *table, int r, const void *addr, size_t len,
                             const char *node, size_t node_len)
{
    table->addrs[r] = malloc(len ? len : 1);
    table->nodes[r] = malloc(node_len + 1);
    if (!table->addrs[r] || !table->nodes[r])
        return PX_ERR_NO_MEMORY;
    memcpy(table->addrs[r], addr, len);
    table->addr_lens[r] = len;
    memcpy(table->nodes[r], node, node_len);
    table->nodes[r][node_len] = '\0';
    return PX_OK;
}

/* A connection rank 0 accepted and challenged, whose hello is not judged
 * yet. */
typedef struct {
    int fd;                  /* -1: decided (refused, or taken as a rank) */
    int64_t end;             /* ms (monotonic): refused when its hello is not in by then */
    unsigned char nonce[NONCE_BYTES];
    unsigned char in[HELLO_BYTES + PX_SHA256_BYTES]; /* hello, then proof */
    size_t have;
    char who[96];            /* its address, for the log */
} pending_t;

static void refuse(pending_t *p, const char *why)
{
    px_warn("bootstrap: refused a connection from %s: %s", p->who, why);
    close(p->fd);
    p->fd = -1;
}

/* Accepts one connection into *p and sends it the challenge. PX_OK (p
 * filled), PX_INPROGRESS (nothing to take: a connection that went away),
 * or PX_ERR_IO (no random bytes). */
static px_status_t challenge(int lfd, pending_t *p, int64_t now)
{
    unsigned char chal[4 + NONCE_BYTES];
    int one = 1;

    memset(p, 0, sizeof(*p));
    p->fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (p->fd < 0)
        return PX_INPROGRESS;
    setsockopt(p->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    peer_name(p->fd, p->who, sizeof(p->who));
    p->end = now + HELLO_MS;
    if (make_nonce(p->nonce) != PX_OK) {
        px_error("bootstrap: no random bytes for the challenge: %s", strerror(errno));
        close(p->fd);
        return PX_ERR_IO;
    }
    put_u32(chal, CHALLENGE_MAGIC);
    memcpy(chal + 4, p->nonce, NONCE_BYTES);
    /* 20 bytes into a new socket's empty buffer: never blocks */
    if (write_all(p->fd, chal, sizeof(chal)) != PX_OK) {
        refuse(p, "it closed before the challenge");
        return PX_INPROGRESS;
    }
    return PX_OK;
}

/* An authenticated hello: checks it against the world (a mismatch is a
 * configuration error: fails setup) and reads the rank's address and node
 * name into the table; the socket becomes socks[rank]. */
static px_status_t admit(px_bootstrap_t *bs, pending_t *p, int64_t deadline,
                         px_addr_table_t *table)
{
    int32_t r = (int32_t)get_u32(p->in + 4), w = (int32_t)get_u32(p->in + 8);
    uint32_t alen = get_u32(p->in + 12), nlen = get_u32(p->in + 16);
    char *abuf, nbuf[MAX_NODE + 1];
    px_status_t status;

    if (w != bs->world || r <= 0 || r >= bs->world || bs->socks[r] >= 0 || alen > MAX_ADDR ||
        nlen > MAX_NODE) {
        px_error("bootstrap: bad hello from %s (rank %d, world %d, expected world %d%s)", p->who,
                 r, w, bs->world, r > 0 && r < bs->world && bs->socks[r] >= 0 ?
                 "; that rank is already connected" : "");
        return PX_ERR_INVALID_ARGUMENT;
    }
    abuf = malloc(alen ? alen : 1);
    if (!abuf)
        return PX_ERR_NO_MEMORY;
    status = read_all(p->fd, abuf, alen, deadline);
    if (status == PX_OK)
        status = read_all(p->fd, nbuf, nlen, deadline);
    if (status != PX_OK)
        px_error("bootstrap: rank %d's hello was cut short", r);
    else
        status = table_put(table, r, abuf, alen, nbuf, nlen);
    free(abuf);
    if (status == PX_OK) {
        bs->socks[r] = p->fd;
        p->fd = -1;
    }
    return status;
}

/* Reads what a pending connection sent (`revents` from poll) and decides
 * it when it can: refused (junk, a wrong proof, closed, or its time is up)
 * or admitted (*accepted + 1). Errors: admit's, which end setup. */
static px_status_t judge(px_bootstrap_t *bs, pending_t *p, short revents, int64_t now,
                         int64_t deadline, px_addr_table_t *table, int *accepted)
{
    unsigned char want[PX_SHA256_BYTES];
    px_status_t status;

    if (revents) {
        ssize_t got = recv(p->fd, p->in + p->have, sizeof(p->in) - p->have, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
            refuse(p, "it closed before its hello");
            return PX_OK;
        }
        if (got > 0)
            p->have += (size_t)got;
    }
    if (p->have >= 4 && get_u32(p->in) != HELLO_MAGIC) {
        refuse(p, "not a bootstrap hello");
        return PX_OK;
    }
    if (p->have < sizeof(p->in)) {
        if (now >= p->end) {
            char why[64];
            snprintf(why, sizeof(why), "no hello within %d ms", HELLO_MS);
            refuse(p, why);
        }
        return PX_OK;
    }
    hello_proof(p->nonce, p->in, want);
    if (!px_secret_equal(want, p->in + HELLO_BYTES, sizeof(want))) {
        refuse(p, "it does not hold this job's secret (PX_JOB_SECRET)");
        return PX_OK;
    }
    status = admit(bs, p, deadline, table);
    if (status != PX_OK)
        return status; /* p->fd closed with the others at out_close */
    (*accepted)++;
    return PX_OK;
}

static px_status_t master_setup(px_bootstrap_t *bs, int port, int64_t deadline,
                                px_addr_table_t *table)
{
    struct sockaddr_in sa;
    int one = 1, lfd, accepted = 0, npend = 0;
    px_status_t status = PX_OK;
    pending_t *pend = calloc(MAX_PENDING, sizeof(*pend));

    if (!pend)
        return PX_ERR_NO_MEMORY;
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) {
        free(pend);
        return PX_ERR_IO;
    }
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port = htons((uint16_t)port);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 1024) != 0) {
        px_error("bootstrap: cannot listen on port %d: %s", port, strerror(errno));
        status = PX_ERR_IO;
        goto out_close;
    }
    /* accept world-1 connections; challenge each and judge its hello, all
     * of them at once (a silent stranger delays nobody) */
    while (accepted < bs->world - 1) {
        struct pollfd fds[1 + MAX_PENDING];
        int64_t now = px_time_mono_ms(), wake = deadline;
        int n = 0;

        if (now >= deadline) {
            px_error("bootstrap: only %d of %d ranks connected before the deadline", accepted + 1,
                     bs->world);
            status = PX_ERR_TIMEOUT;
            goto out_close;
        }
        fds[0].fd = lfd;
        fds[0].events = npend < MAX_PENDING ? POLLIN : 0;
        for (int i = 0; i < npend; i++) {
            fds[1 + i].fd = pend[i].fd;
            fds[1 + i].events = POLLIN;
            wake = pend[i].end < wake ? pend[i].end : wake;
        }
        if (poll(fds, 1 + (nfds_t)npend, (int)(wake > now ? wake - now : 0)) < 0 &&
            errno != EINTR) {
            status = PX_ERR_IO;
            goto out_close;
        }
        now = px_time_mono_ms();
        for (int i = 0; i < npend; i++) {
            status = judge(bs, &pend[i], fds[1 + i].revents, now, deadline, table, &accepted);
            if (status != PX_OK)
                goto out_close;
        }
        for (int i = 0; i < npend; i++) /* keep those still undecided */
            if (pend[i].fd >= 0)
                pend[n++] = pend[i];
        npend = n;
        if (fds[0].revents & POLLIN) {
            status = challenge(lfd, &pend[npend], now);
            if (status == PX_OK)
                npend++;
            else if (status != PX_INPROGRESS)
                goto out_close;
            status = PX_OK;
        }
    }
    /* send the table to everyone */
    for (int dst = 1; dst < bs->world && status == PX_OK; dst++) {
        for (int r = 0; r < bs->world && status == PX_OK; r++) {
            unsigned char lens[8];
            size_t nl = strlen(table->nodes[r]);
            put_u32(lens, (uint32_t)table->addr_lens[r]);
            put_u32(lens + 4, (uint32_t)nl);
            status = write_all(bs->socks[dst], lens, 8);
            if (status == PX_OK)
                status = write_all(bs->socks[dst], table->addrs[r], table->addr_lens[r]);
            if (status == PX_OK)
                status = write_all(bs->socks[dst], table->nodes[r], nl);
        }
        if (status == PX_OK)
            status = send_record(bs->socks[dst], PX_WATCH_HUP_RANK, 0);
        if (status != PX_OK)
            px_error("bootstrap: sending the table to rank %d failed", dst);
    }
out_close:
    for (int i = 0; i < npend; i++)
        close(pend[i].fd);
    close(lfd);
    free(pend);
    return status;
}

static px_status_t worker_setup(px_bootstrap_t *bs, const char *host, int port, int64_t deadline,
                                const void *addr, size_t len, const char *node,
                                px_addr_table_t *table)
{
    struct addrinfo hints, *res = NULL;
    char portstr[16];
    unsigned char hello[HELLO_BYTES], chal[4 + NONCE_BYTES], proof[PX_SHA256_BYTES];
    int fd = -1, one = 1, gai;
    px_status_t status;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(portstr, sizeof(portstr), "%d", port);
    gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0) {
        px_error("bootstrap: cannot resolve PX_MASTER_ADDR=%s: %s", host, gai_strerror(gai));
        return PX_ERR_INVALID_ARGUMENT;
    }
    for (;;) {
        fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            freeaddrinfo(res);
            return PX_ERR_IO;
        }
        if (connect(fd, res->ai_addr, res->ai_addrlen) == 0)
            break;
        close(fd);
        fd = -1;
        if (px_time_mono_ms() >= deadline) {
            px_error("bootstrap: rank %d could not connect to %s:%d before the deadline",
                     bs->rank, host, port);
            freeaddrinfo(res);
            return PX_ERR_TIMEOUT;
        }
        {
            struct timespec ts = {0, 50 * 1000 * 1000}; /* retry every 50 ms */
            nanosleep(&ts, NULL);
        }
    }
    freeaddrinfo(res);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    bs->socks[0] = fd;
    status = read_all(fd, chal, sizeof(chal), deadline);
    if (status != PX_OK || get_u32(chal) != CHALLENGE_MAGIC) {
        px_error("bootstrap: rank %d: %s:%d sent no bootstrap challenge (%s)", bs->rank, host,
                 port, status != PX_OK ? px_status_str(status) : "wrong magic");
        return status != PX_OK ? status : PX_ERR_IO;
    }
    put_u32(hello, HELLO_MAGIC);
    put_u32(hello + 4, (uint32_t)bs->rank);
    put_u32(hello + 8, (uint32_t)bs->world);
    put_u32(hello + 12, (uint32_t)len);
    put_u32(hello + 16, (uint32_t)strlen(node));
    hello_proof(chal + 4, hello, proof);
    status = write_all(fd, hello, sizeof(hello));
    if (status == PX_OK)
        status = write_all(fd, proof, sizeof(proof));
    if (status == PX_OK)
        status = write_all(fd, addr, len);
    if (status == PX_OK)
        status = write_all(fd, node, strlen(node));
    if (status != PX_OK) { /* rank 0 closes as soon as the proof is wrong */
        px_error("bootstrap: rank %d: sending hello failed: rank 0 closed the connection (it "
                 "refuses ranks whose PX_JOB_SECRET is not its own)", bs->rank);
        return status;
    }
    {
        /* rank 0 answers with the table, or closes: refused */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        char c;
        int64_t left = deadline - px_time_mono_ms();
        if (poll(&pfd, 1, left > 0 ? (int)left : 0) == 1 &&
            recv(fd, &c, 1, MSG_PEEK) == 0) {
            px_error("bootstrap: rank %d: rank 0 refused this rank (its PX_JOB_SECRET is not "
                     "this rank's)", bs->rank);
            return PX_ERR_INVALID_ARGUMENT;
        }
    }
    for (int r = 0; r < bs->world; r++) {
        unsigned char lens[8];
        uint32_t alen, nlen;
        char nbuf[MAX_NODE + 1];
        char *abuf;
        status = read_all(fd, lens, 8, deadline);
        if (status != PX_OK) {
            px_error("bootstrap: rank %d: reading the table failed (%s)", bs->rank,
                     px_status_str(status));
            return status;
        }
        alen = get_u32(lens);
        nlen = get_u32(lens + 4);
        if (alen > MAX_ADDR || nlen > MAX_NODE)
            return PX_ERR_IO;
        abuf = malloc(alen ? alen : 1);
        if (!abuf)
            return PX_ERR_NO_MEMORY;
        status = read_all(fd, abuf, alen, deadline);
        if (status == PX_OK)
            status = read_all(fd, nbuf, nlen, deadline);
        if (status == PX_OK)
            status = table_put(table, r, abuf, alen, nbuf, nlen);
        free(abuf);
        if (status != PX_OK)
            return status;
    }
    bs->watch_fd = fd; /* the HUP_RANK record waits in it for the comm */
    return PX_OK;
}

px_status_t px_bootstrap_create(int rank, int world_size, const void *addr, size_t len,
                                px_bootstrap_t **bootstrap_p, px_addr_table_t *table)
{
    int64_t deadline = px_time_mono_ms() + px_env_int("PX_CONNECT_TIMEOUT_MS");
    const char *host = getenv("PX_MASTER_ADDR");
    char node[MAX_NODE];
    int port = 0;
    px_bootstrap_t *bs;
    px_status_t status;

    if (rank < 0 || rank >= world_size || !addr || !len || !bootstrap_p || !table) {
        px_error("px_bootstrap_create: bad arguments (rank %d, world %d)", rank, world_size);
        return PX_ERR_INVALID_ARGUMENT;
    }
    if (world_size > 1) {
        status = env_int("PX_MASTER_PORT", -1, 1, 65535, &port);
        if (status != PX_OK)
            return status;
    }
    if (!host || !*host)
        host = "127.0.0.1";
    node_name(node, sizeof(node));
    status = px_addr_table_init(table, world_size);
    if (status != PX_OK)
        return status;
    bs = calloc(1, sizeof(*bs));
    if (!bs) {
        status = PX_ERR_NO_MEMORY;
        goto err_table;
    }
    bs->rank = rank;
    bs->world = world_size;
    bs->watch_fd = -1;
    bs->died_pipe[0] = bs->died_pipe[1] = bs->stop_pipe[0] = bs->stop_pipe[1] = -1;
    pthread_mutex_init(&bs->lock, NULL);
    pthread_cond_init(&bs->cond, NULL);
    bs->socks = malloc(sizeof(int) * (size_t)world_size);
    bs->bye = calloc((size_t)world_size, sizeof(int));
    bs->closed = calloc((size_t)world_size, sizeof(int));
    if (!bs->socks || !bs->bye || !bs->closed) {
        status = PX_ERR_NO_MEMORY;
        goto err_bs;
    }
    for (int r = 0; r < world_size; r++)
        bs->socks[r] = -1;
    if (rank == 0) {
        status = table_put(table, 0, addr, len, node, strlen(node));
        if (status != PX_OK)
            goto err_bs;
        if (world_size > 1) {
            status = master_setup(bs, port, deadline, table);
            if (status != PX_OK)
                goto err_bs;
        }
        if (pipe2(bs->died_pipe, O_CLOEXEC) != 0 || pipe2(bs->stop_pipe, O_CLOEXEC) != 0) {
            status = PX_ERR_IO;
            goto err_bs;
        }
        bs->watch_fd = bs->died_pipe[0];
        if (world_size > 1) {
            if (pthread_create(&bs->thread, NULL, watcher_main, bs) != 0) {
                status = PX_ERR_INTERNAL;
                goto err_bs;
            }
            bs->thread_started = 1;
        }
    } else {
        status = worker_setup(bs, host, port, deadline, addr, len, node, table);
        if (status != PX_OK)
            goto err_bs;
    }
    *bootstrap_p = bs;
    return PX_OK;

err_bs:
    /* closing without byes: peers see a hang-up, which is right for a failed setup */
    px_bootstrap_destroy(bs);
err_table:
    px_addr_table_free(table);
    return status;
}

int px_bootstrap_watch_fd(const px_bootstrap_t *bootstrap)
{
    return bootstrap ? bootstrap->watch_fd : -1;
}

void px_bootstrap_destroy(px_bootstrap_t *bootstrap)
{
    px_bootstrap_t *bs = bootstrap;

    if (!bs)
        return;
    if (bs->rank != 0) {
        if (bs->socks && bs->socks[0] >= 0) {
            send_record(bs->socks[0], PX_BOOT_BYE, bs->rank);
            close(bs->socks[0]);
        }
    } else {
        if (bs->thread_started) {
            /* wait (bounded) until every rank said bye or hung up */
            struct timespec end;
            int missing = 0;
            clock_gettime(CLOCK_REALTIME, &end);
            end.tv_sec += px_env_int("PX_CONNECT_TIMEOUT_MS") / 1000 + 1;
            pthread_mutex_lock(&bs->lock);
            for (;;) {
                missing = 0;
                for (int r = 1; r < bs->world; r++)
                    missing += !bs->bye[r] && !bs->closed[r];
                if (!missing || pthread_cond_timedwait(&bs->cond, &bs->lock, &end) != 0)
                    break;
            }
            pthread_mutex_unlock(&bs->lock);
            if (missing)
                px_warn("bootstrap: %d rank(s) never said goodbye", missing);
            if (write(bs->stop_pipe[1], "x", 1) != 1)
                px_warn("bootstrap: cannot stop the watcher thread");
            pthread_join(bs->thread, NULL);
        }
        for (int r = 1; bs->socks && r < bs->world; r++)
            if (bs->socks[r] >= 0)
                close(bs->socks[r]);
        for (int i = 0; i < 2; i++) {
            if (bs->died_pipe[i] >= 0)
                close(bs->died_pipe[i]);
            if (bs->stop_pipe[i] >= 0)
                close(bs->stop_pipe[i]);
        }
    }
    pthread_mutex_destroy(&bs->lock);
    pthread_cond_destroy(&bs->cond);
    free(bs->socks);
    free(bs->bye);
    free(bs->closed);
    free(bs);
}
