/* membership.c: cluster membership by SWIM (swim.h) over the Peer plane.
 *
 * The protocol period is PX_HEARTBEAT_MS (--heartbeat-ms, T). Each period
 * a daemon pings ONE member, the next of a shuffled round (Peer.Heartbeat,
 * deadline T); without an ack after T/2 it asks k = 3 other members to
 * ping it (Peer.IndirectProbe, deadline T/2); once every call of the
 * probe has ended with no ack the member becomes SUSPECT. A suspect not
 * refuted within the suspicion timeout becomes DEAD (its jobs fail as
 * before: PXD_NODE_DEAD), when its own suspicion ends (a timer, not the
 * next period). The suspicion timeout is derived from PX_PEER_DEAD_MS
 * (--peer-dead-ms) so that every member counts a killed node dead within
 * about peer-dead-ms:
 *   suspect = max(2T, peer-dead-ms - 3T)
 * Each period each member probes the killed node with chance 1/(N-1), so
 * its first probe comes e/(e-1) ~ 1.6 periods after it died on average
 * (SWIM section 3.1; more than 4 periods once in e^4 ~ 55); the probe ends
 * within a period (at once where the connection is refused); and the
 * DEAD is pushed to every member at once (below): so every member counts
 * a killed node dead about peer-dead-ms - 2T after it died (tests/scale,
 * N = 128, T = 1 s, peer-dead 10 s: median 7.75 s, the last member
 * 8.59 s), a hung one up to a period later.
 * A probe whose calls ended more than 2T after it began is not trusted:
 * this daemon itself was too slow to read the answers in time (a loaded
 * host; Lifeguard's local health, Dadgar et al. 2018, in its simplest
 * form), so it suspects nobody from it.
 *
 * Urgent news (a member dead, back from the dead or in a new life) is
 * pushed at once to PUSH_FANOUT random members, each of which pushes it
 * on once in turn: a flood of about PUSH_FANOUT x N calls that reaches
 * every member in a few round trips, where the piggyback alone moves a
 * rumour one hop a period. A new member is news too, pushed at most once
 * a period, and not by a node that is joining itself (at a mass join
 * that would be N^2 pushes; the joiners pull from the seed instead). A
 * suspicion is not pushed: on a loaded host probes time out by the
 * hundred, and a flood for each (measured: 35,000 suspicions logged in a
 * 128-node join on 2 cores) is the load that makes more of them. This
 * node refuting a rumour of its death pushes the refutation (PUSH_FANOUT
 * calls, no flood).
 *
 * Every ping and ack carries the sender's NodeInfo and incarnation and up
 * to PIGGYBACK rumours (HeartbeatRequest/Response.gossip: a member's
 * state, incarnation and packed NodeInfo), each sent LAMBDA
 * ceil(log2(N+1)) times. While rumours are queued a daemon also pings
 * FANOUT (1) random member each period (memberlist's gossip rounds):
 * idle, nothing is queued and a daemon sends one ping a period, so its
 * traffic and CPU do not grow with N. This node's facts (its NodeInfo:
 * devices and the jobs holding them, draining, version, addresses) are
 * compared each period; a change raises its incarnation and is gossiped.
 *
 * Joining: --peers are seeds. Until a seed answered, each is pinged every
 * period with `sync`: the answer lists every member the seed knows
 * (HeartbeatResponse.members), taken without gossiping it on
 * (px_swim_merge). The joining node pulls that list from the seed that
 * answered every period until JOIN_QUIET answers in a row bring no new
 * member, and the seed pushes the newcomer on (above), so a new node is
 * alive to every member within a few round trips; a restarted node's new
 * life is urgent news, pushed on by its seed, whatever the outage. A
 * restarted node's incarnation starts at the wall clock in ms at its
 * start (BOOT_SHIFT): above every rumour of its previous life, so no
 * member's DEAD holds it down, and a member sees the new life even when
 * it had not counted it dead (px_jobnames_member_up runs for it as for
 * one coming up). Every
 * SYNC_PERIODS the period's probe asks for a sync too (anti-entropy), and
 * every DEAD_RETRY_PERIODS one DEAD member is pinged (a healed partition
 * is found again). Loop thread only. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "px_env.h"
#include "px_log.h"
#include "px_time.h"
#include "swim.h"

#define P_PEER "/parallax.v1.Peer/"
#define INDIRECT_K 3
/* Each rumour is sent LAMBDA ceil(log2(N+1)) times, at most PIGGYBACK a
 * message: after a 128-node join, 3 and 10 kept every member gossiping
 * the join for over a minute (1.9 calls a member a period 20 s after
 * convergence); 2 and 32 drain it in seconds. */
#define LAMBDA 2
#define PIGGYBACK 32
#define FANOUT 1
/* Urgent news (swim.h's states changing, not facts) is pushed to
 * PUSH_FANOUT members at once, at most one push per period/PUSH_GAP_DIV. */
#define PUSH_FANOUT 3
#define PUSH_GAP_DIV 4
/* Anti-entropy: every SYNC_PERIODS the period's probe also pulls the
 * target's whole member list, for whatever gossip and pushes missed (one
 * call a period either way; the answer is larger). */
#define SYNC_PERIODS 5
#define DEAD_RETRY_PERIODS 10
/* A joining node pulls the member list from its seed every period until
 * JOIN_QUIET pulls in a row brought no new member: at a mass join the
 * members that join after it are in the seed's later answers. (It used
 * to ping every member it learned instead, 16 then 64 a period: at a
 * 128-node join on 2 cores that was N^2 calls in ~10 s, each ~1.5 ms of
 * CPU, and the overloaded host's probes timed out by the thousand.) */
#define JOIN_QUIET 3
/* An incarnation is (start time in wall ms) << BOOT_SHIFT, plus one for
 * each refutation or change of facts in that life: a new life is a change
 * of its high bits. */
#define BOOT_SHIFT 20

enum { PING_PROBE, PING_GOSSIP, PING_SEED, PING_NOTIFY, PING_RETRY };

static long period_ms(void)
{
    long p = px_env_int("PX_HEARTBEAT_MS");
    return p < 10 ? 10 : p;
}

/* The deadline of a ping that is not this period's probe (a join, a
 * push, a gossip round): nothing is suspected from it, so a loaded
 * peer gets longer to answer than a probe's period. */
static int slow_ms(void)
{
    long t = 5 * period_ms();
    return t < 5000 ? 5000 : (int)t;
}

static int64_t suspect_ms(px_daemon_t *d)
{
    long t = period_ms();
    int64_t ms = px_env_int("PX_PEER_DEAD_MS") - 3 * (int64_t)t;
    (void)d;
    return ms < 2 * t ? 2 * t : ms;
}

struct probe;
static int send_ping(px_daemon_t *d, px_peer_t *p, px_peer_t *via, int kind, int sync,
                     int timeout_ms, struct probe *pr);

/* NodeInfo packed as a member's facts, without the fields that change by
 * themselves (last_seen_ms, now_ms); *len_p bytes, caller frees. A change
 * of facts raises the incarnation and is gossiped to the whole cluster, so
 * a field that moves every period (a utilisation, a temperature) must be
 * cleared here too: it would keep the gossip fan-out busy for good (it
 * still travels in every ping's and ack's own NodeInfo). */
static uint8_t *pack_facts(const Parallax__V1__NodeInfo *info, size_t *len_p)
{
    Parallax__V1__NodeInfo copy = *info;
    Parallax__V1__GpuStats *gpus = NULL, **gpup = NULL;
    uint8_t *buf;
    copy.last_seen_ms = 0;
    copy.now_ms = 0;
    /* a GPU's samples (memory used, utilization, power, temperature, our
     * ranks' pids) move every PX_GPU_SAMPLE_MS: the facts keep which GPUs
     * there are and their foreign processes (what placement reads), and
     * px_gputelem_from_info keeps the last directly heard samples */
    if (info->n_gpus) {
        gpus = calloc(info->n_gpus, sizeof(*gpus));
        gpup = calloc(info->n_gpus, sizeof(*gpup));
        if (!gpus || !gpup) {
            free(gpus);
            free(gpup);
            return NULL;
        }
        for (size_t i = 0; i < info->n_gpus; i++) {
            gpus[i] = *info->gpus[i];
            px_gputelem_facts_only(&gpus[i]);
            gpup[i] = &gpus[i];
        }
        copy.gpus = gpup;
    }
    *len_p = parallax__v1__node_info__get_packed_size(&copy);
    buf = malloc(*len_p ? *len_p : 1);
    if (buf)
        parallax__v1__node_info__pack(&copy, buf);
    free(gpus);
    free(gpup);
    return buf;
}

/* ------------------------------------------------------- urgent news */

static void on_expire(uv_timer_t *t);

/* Starts t to call cb in `in` ms, unless it is due sooner already. */
static void start_by(px_daemon_t *d, uv_timer_t *t, uv_timer_cb cb, uint64_t in)
{
    if (d->stopping)
        return;
    if (uv_is_active((uv_handle_t *)t) && uv_timer_get_due_in(t) <= in)
        return;
    t->data = d;
    uv_timer_start(t, cb, in, 0);
}

/* Runs px_swim_expire when the earliest suspicion ends (at `at`, mono ms). */
static void expire_at(px_daemon_t *d, int64_t at)
{
    int64_t now = px_time_mono_ms();
    start_by(d, &d->swim_expire_timer, on_expire, at > now ? (uint64_t)(at - now) : 0);
}

static void on_expire(uv_timer_t *t)
{
    px_daemon_t *d = t->data;
    int64_t next;
    if (d->stopping || !d->swim)
        return;
    next = px_swim_expire(d->swim, px_time_mono_ms());
    if (next >= 0)
        expire_at(d, next);
}

/* One push: PUSH_FANOUT random members get a ping carrying the newest
 * rumours. Each member that learns news from it pushes once in turn, so
 * news spreads as a flood (about PUSH_FANOUT x N calls, log(N) hops of
 * a round trip each) instead of one hop a period; the piggyback rounds
 * and the anti-entropy sync reach whoever the flood missed (about
 * N e^-PUSH_FANOUT members). */
static void on_push(uv_timer_t *t)
{
    px_daemon_t *d = t->data;
    px_swim_member_t *to[PUSH_FANOUT];
    char addr[PUSH_FANOUT][PXD_ADDR_MAX];
    int n;

    if (d->stopping || !d->swim)
        return;
    d->swim_push_last_ms = px_time_mono_ms();
    n = px_swim_sample(d->swim, to, PUSH_FANOUT, NULL);
    for (int i = 0; i < n; i++) /* addresses: a ping may add a peer */
        snprintf(addr[i], sizeof(addr[i]), "%s", to[i]->addr);
    for (int i = 0; i < n; i++) {
        px_peer_t *p = px_nodes_peer_by_addr(d, addr[i]);
        if (p)
            send_ping(d, p, NULL, PING_GOSSIP, 0, slow_ms(), NULL);
    }
}

/* News that must not wait for the piggyback rounds (a member dead, back
 * from the dead, in a new life or new; this node refuting a rumour): a
 * push now, or period/gap_div after the last one, so that news arriving
 * together goes out together. */
static void push_soon(px_daemon_t *d, int gap_div)
{
    int64_t wait = d->swim_push_last_ms + period_ms() / gap_div - px_time_mono_ms();
    start_by(d, &d->swim_push_timer, on_push,
             d->swim_push_last_ms && wait > 0 ? (uint64_t)wait : 0);
}

/* A member changed in the state machine: the peer table follows. */
static void on_member(void *arg, px_swim_member_t *m, px_swim_state_t old, uint64_t old_inc,
                      int is_new)
{
    px_daemon_t *d = arg;
    px_peer_t *p = px_nodes_peer_by_addr(d, m->addr);
    int restarted = !is_new && (m->incarnation >> BOOT_SHIFT) != (old_inc >> BOOT_SHIFT);

    if (!p) {
        if (m->state == PX_SWIM_DEAD || !(p = px_nodes_peer_add(d, m->addr)))
            return;
        if (is_new)
            px_info("peer %s (%s) joined", m->name, m->addr);
    }
    if (m->facts && m->state == PX_SWIM_ALIVE) {
        Parallax__V1__NodeInfo *info =
            parallax__v1__node_info__unpack(NULL, m->facts_len, m->facts);
        if (info) {
            px_nodes_heard(d, info);
            parallax__v1__node_info__free_unpacked(info, NULL);
        }
        p = px_nodes_peer_by_addr(d, m->addr);
        if (!p)
            return;
        px_nodes_emit(d, PXD_NODE_HEARD, p); /* its devices are fresh */
        px_nodes_emit(d, PXD_NODE_DEVICES, NULL);
        p = px_nodes_peer_by_addr(d, m->addr);
        if (!p)
            return;
    }
    if (!p->name[0] && m->name[0])
        snprintf(p->name, sizeof(p->name), "%s", m->name);
    if (m->state == PX_SWIM_SUSPECT && old == PX_SWIM_ALIVE && !is_new)
        px_info("peer %s (%s) is suspect: a probe found no answer", m->name, m->addr);
    if (m->state == PX_SWIM_SUSPECT)
        expire_at(d, m->suspect_since_ms + suspect_ms(d));
    if (!is_new && ((m->state == PX_SWIM_DEAD) != (old == PX_SWIM_DEAD) || restarted))
        push_soon(d, PUSH_GAP_DIV); /* dead, back from the dead or in a new life */
    else if (is_new && d->swim_join_quiet >= JOIN_QUIET)
        push_soon(d, 1); /* a new member: at most a push a period, and not
                          * while this node is joining itself (a mass
                          * join: every joiner pulls from the seed) */
    if (restarted && p->alive && m->state != PX_SWIM_DEAD) {
        /* a new life before anyone counted it dead: what a member that
         * comes up gets (its channel, the names it owns) */
        px_info("peer %s (%s) restarted", p->name, p->peer_addr);
        px_rpc_channel_reconnect_now(p->channel);
        p->up_pending = 1;
    } else {
        px_nodes_peer_alive(d, p, m->state != PX_SWIM_DEAD);
    }
    /* up_pending: px_jobnames_member_up at the next ack from it (take_ack) */
}

/* ------------------------------------------------------------ messages */

/* Rumours as Member messages: storage for up to PIGGYBACK (or, for a
 * sync, every member) in one block the caller frees. */
typedef struct {
    Parallax__V1__Member **ptrs;
    Parallax__V1__Member *each;
    size_t n;
} members_t;

static void to_members(const px_swim_rumour_t *r, size_t n, members_t *out)
{
    out->n = 0;
    out->ptrs = calloc(n ? n : 1, sizeof(*out->ptrs) + sizeof(*out->each));
    if (!out->ptrs)
        return;
    out->each = (Parallax__V1__Member *)(out->ptrs + (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        Parallax__V1__Member *m = &out->each[i];
        parallax__v1__member__init(m);
        m->name = (char *)r[i].name;
        m->peer_addr = (char *)r[i].addr;
        m->incarnation = r[i].incarnation;
        m->state = (Parallax__V1__MemberState)r[i].state;
        m->node_info.data = (uint8_t *)r[i].facts;
        m->node_info.len = r[i].facts ? r[i].facts_len : 0;
        out->ptrs[i] = m;
    }
    out->n = n;
}

static void gossip_for(px_daemon_t *d, const char *to_addr, members_t *out)
{
    px_swim_rumour_t r[PIGGYBACK];
    size_t n = px_swim_piggyback(d->swim, to_addr, r, PIGGYBACK);
    to_members(r, n, out);
}

/* Rumours from a message: gossip (a ping's or ack's piggyback) or, with
 * `sync`, a member's whole table (px_swim_merge). */
static void take_members(px_daemon_t *d, Parallax__V1__Member *const *m, size_t n, int sync)
{
    int64_t now = px_time_mono_ms();
    uint64_t inc = px_swim_incarnation(d->swim);
    for (size_t i = 0; i < n; i++) {
        px_swim_rumour_t r = {m[i]->peer_addr, m[i]->name, m[i]->incarnation,
                              (px_swim_state_t)m[i]->state, m[i]->node_info.data,
                              m[i]->node_info.len};
        if (r.state > PX_SWIM_DEAD)
            continue;
        if (sync)
            px_swim_merge(d->swim, &r, now);
        else
            px_swim_apply(d->swim, &r, now);
    }
    if (px_swim_incarnation(d->swim) != inc)
        push_soon(d, PUSH_GAP_DIV); /* a rumour of this node's death refuted */
}

/* The sender of a ping or an ack (its NodeInfo and incarnation): its
 * facts, and the rumour that it is alive. */
static void take_sender(px_daemon_t *d, const Parallax__V1__NodeInfo *node, uint64_t inc)
{
    px_swim_rumour_t r;
    size_t len = 0;
    uint8_t *facts;
    px_peer_t *p;

    if (!node || !node->peer_addr || !*node->peer_addr || !node->name)
        return;
    p = px_nodes_heard(d, node);
    if (!p)
        return; /* this node's own name */
    px_nodes_peer_seen(p);
    px_nodes_emit(d, PXD_NODE_HEARD, p); /* its devices are fresh */
    px_nodes_emit(d, PXD_NODE_DEVICES, NULL); /* device usage may have changed */
    facts = pack_facts(node, &len);
    r = (px_swim_rumour_t){node->peer_addr, node->name, inc ? inc : 1, PX_SWIM_ALIVE, facts, len};
    px_swim_apply(d->swim, &r, px_time_mono_ms());
    free(facts);
}

/* The self NodeInfo a ping or ack carries; *facts_changed set when it
 * differs from the facts gossiped last (the incarnation then rises). */
static void self_facts(px_daemon_t *d, Parallax__V1__NodeInfo *self)
{
    size_t len = 0;
    uint8_t *facts;
    px_nodes_self_info(d, self);
    facts = pack_facts(self, &len);
    if (facts && px_swim_set_facts(d->swim, facts, len) == 1)
        px_debug("facts changed: incarnation %llu",
                 (unsigned long long)px_swim_incarnation(d->swim));
    free(facts);
}

/* ---------------------------------------------------------------- pings */

/* One period's probe of one member: its direct ping and indirect probes
 * hold a reference each, the period while it is current one more; when
 * the last is dropped without an ack, the member is suspected. */
typedef struct probe {
    char addr[PXD_ADDR_MAX];
    uint64_t incarnation;           /* the target's when probed */
    int64_t started_ms;             /* mono ms when the direct ping went out */
    int refs;
    int acked;
    int indirect;                   /* indirect probes sent (or none possible) */
} probe_t;

typedef struct {
    char addr[PXD_ADDR_MAX];
    int kind;
    probe_t *probe;                 /* PING_PROBE: the probe it belongs to */
} ping_ctx_t;

static void probe_unref(px_daemon_t *d, probe_t *pr)
{
    if (--pr->refs > 0)
        return;
    if (!pr->acked && !d->stopping && d->swim) {
        int64_t now = px_time_mono_ms();
        if (now - pr->started_ms <= 2 * period_ms())
            px_swim_probe_failed(d->swim, pr->addr, pr->incarnation, now);
        else
            px_debug("probe of %s unanswered, but ended %lld ms after it began: this node "
                     "was too slow to tell; no suspicion", pr->addr,
                     (long long)(now - pr->started_ms));
    }
    free(pr);
}

static void probe_indirect(px_daemon_t *d, probe_t *pr);


static void take_ack(px_daemon_t *d, const char *addr, const Parallax__V1__HeartbeatResponse *r,
                     int kind)
{
    take_sender(d, r->node, r->incarnation);
    take_members(d, r->gossip, r->n_gossip, 0);
    if (r->n_members || kind == PING_SEED) {
        size_t known = px_swim_count(d->swim); /* members are never removed */
        take_members(d, r->members, r->n_members, 1);
        d->swim_synced_at = d->swim_periods;
        if (kind == PING_SEED) {
            if (!d->swim_seed[0]) /* joined: pull from this seed until quiet */
                snprintf(d->swim_seed, sizeof(d->swim_seed), "%s", addr);
            d->swim_join_quiet = px_swim_count(d->swim) == known ? d->swim_join_quiet + 1 : 0;
        }
    }
    {
        /* a call of ours reached it: what a member coming up gets from the
         * holders of the names it owns (jobnames.c) */
        px_peer_t *p = px_nodes_peer_by_addr(d, r->node && r->node->peer_addr
                                                    ? r->node->peer_addr : addr);
        if (p && p->up_pending && p->alive) {
            p->up_pending = 0;
            px_jobnames_member_up(d, p);
        }
    }
}

static void on_ping_done(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                         const ProtobufCMessage *response)
{
    ping_ctx_t *ctx = arg;
    px_peer_t *p = ctx->kind == PING_SEED ? px_nodes_peer_by_addr(d, ctx->addr) : NULL;
    if (p)
        p->joining = 0;
    if (ctx->kind == PING_SEED && code != GRPC_STATUS_OK && !strcmp(ctx->addr, d->swim_seed))
        d->swim_join_quiet++; /* a seed gone after the join: nothing more to pull */
    if (code == GRPC_STATUS_OK)
        take_ack(d, ctx->addr, (const Parallax__V1__HeartbeatResponse *)response, ctx->kind);
    else
        px_debug("ping of %s: %s", ctx->addr, message ? message : "");
    if (ctx->probe) {
        probe_t *pr = ctx->probe;
        if (code == GRPC_STATUS_OK)
            pr->acked = 1;
        else if (!pr->acked && !pr->indirect && pr == d->swim_probe)
            probe_indirect(d, pr); /* the direct ping failed early: at once */
        probe_unref(d, pr);
    }
    free(ctx);
}

/* A ping to `p` (its rumours and this node's NodeInfo), or with `via` an
 * indirect probe of `p` through `via`: 1 if sent (its ack comes to
 * on_ping_done), 0 if not. */
static int send_ping(px_daemon_t *d, px_peer_t *p, px_peer_t *via, int kind, int sync,
                     int timeout_ms, probe_t *pr)
{
    Parallax__V1__HeartbeatRequest req = PARALLAX__V1__HEARTBEAT_REQUEST__INIT;
    Parallax__V1__IndirectProbeRequest ind = PARALLAX__V1__INDIRECT_PROBE_REQUEST__INIT;
    Parallax__V1__NodeInfo self;
    members_t g;
    ping_ctx_t *ctx;
    int sent;

    if (d->stopping || !(ctx = calloc(1, sizeof(*ctx))))
        return 0;
    snprintf(ctx->addr, sizeof(ctx->addr), "%s", p->peer_addr);
    ctx->kind = kind;
    ctx->probe = NULL;
    self_facts(d, &self);
    gossip_for(d, p->peer_addr, &g);
    req.node = &self;
    req.incarnation = px_swim_incarnation(d->swim);
    req.gossip = g.ptrs;
    req.n_gossip = g.n;
    req.sync = sync;
    if (via) {
        ind.target_addr = p->peer_addr;
        ind.ping = &req;
    }
    sent = px_daemon_call_async(d, via ? via->channel : p->channel,
                                via ? P_PEER "IndirectProbe" : P_PEER "Heartbeat",
                                via ? &ind.base : &req.base,
                                &parallax__v1__heartbeat_response__descriptor, timeout_ms,
                                on_ping_done, ctx) == PX_OK;
    if (!sent)
        free(ctx);
    else if ((ctx->probe = pr))
        pr->refs++;
    free(g.ptrs);
    px_nodes_info_free(&self);
    return sent;
}

/* k members probe pr's target for this node (SWIM's ping-req). */
static void probe_indirect(px_daemon_t *d, probe_t *pr)
{
    px_swim_member_t *via[INDIRECT_K];
    char vaddr[INDIRECT_K][PXD_ADDR_MAX];
    int k = px_swim_indirect(d->swim, via, INDIRECT_K);

    pr->indirect = 1;
    for (int i = 0; i < k; i++) /* addresses: adding a peer moves the table */
        snprintf(vaddr[i], sizeof(vaddr[i]), "%s", via[i]->addr);
    for (int i = 0; i < k; i++) {
        px_peer_t *p, *v;
        if (!px_nodes_peer_by_addr(d, pr->addr) && !px_nodes_peer_add(d, pr->addr))
            break;
        if (!px_nodes_peer_by_addr(d, vaddr[i]) && !px_nodes_peer_add(d, vaddr[i]))
            continue;
        p = px_nodes_peer_by_addr(d, pr->addr);
        v = px_nodes_peer_by_addr(d, vaddr[i]);
        if (p && v)
            send_ping(d, p, v, PING_PROBE, 0, (int)(period_ms() / 2), pr);
    }
    /* every call of the probe is out: it is decided when they end (a
     * refused connection ends them at once), not at the next period */
    if (pr == d->swim_probe) {
        d->swim_probe = NULL;
        probe_unref(d, pr);
    }
}

/* Half a period into it: no ack yet, so k members probe the target. */
static void on_half_period(uv_timer_t *t)
{
    px_daemon_t *d = t->data;
    probe_t *pr = d->swim_probe;

    if (!d->stopping && pr && !pr->acked && !pr->indirect)
        probe_indirect(d, pr);
}

static void on_period(uv_timer_t *t)
{
    px_daemon_t *d = t->data;
    int64_t now = px_time_mono_ms();
    px_swim_member_t *target, *extra[FANOUT];
    int sync, n_extra = 0;

    if (d->stopping)
        return;
    d->swim_periods++;
    px_swim_set_suspect_ms(d->swim, suspect_ms(d));
    if (d->swim_probe) { /* last period's probe: decided once its calls end */
        probe_t *last = d->swim_probe;
        d->swim_probe = NULL;
        probe_unref(d, last);
    }
    {
        /* before the target is chosen; the timer again, suspect_ms may
         * have changed */
        int64_t next = px_swim_expire(d->swim, now);
        if (next >= 0)
            expire_at(d, next);
    }
    target = px_swim_tick(d->swim);
    {
        /* this node's facts first: a change is in this period's rumours */
        Parallax__V1__NodeInfo self;
        self_facts(d, &self);
        px_nodes_info_free(&self);
    }
    if (px_swim_pending(d->swim)) /* gossip rounds while rumours are queued */
        n_extra = px_swim_indirect(d->swim, extra, FANOUT);
    sync = d->swim_synced_at < 0 || d->swim_periods - d->swim_synced_at >= SYNC_PERIODS;
    if (target) {
        char taddr[PXD_ADDR_MAX];
        px_peer_t *p;
        probe_t *pr;
        uint64_t tinc = target->incarnation;
        snprintf(taddr, sizeof(taddr), "%s", target->addr);
        for (int i = 0; i < n_extra; i++) {
            px_peer_t *q = px_nodes_peer_by_addr(d, extra[i]->addr);
            if (q) /* every member not DEAD has its peer (on_member) */
                send_ping(d, q, NULL, PING_GOSSIP, 0, slow_ms(), NULL);
        }
        if (((p = px_nodes_peer_by_addr(d, taddr)) || (p = px_nodes_peer_add(d, taddr))) &&
            (pr = calloc(1, sizeof(*pr)))) {
            snprintf(pr->addr, sizeof(pr->addr), "%s", taddr);
            pr->incarnation = tinc;
            pr->started_ms = now;
            pr->refs = 1; /* current */
            d->swim_probe = pr;
            send_ping(d, p, NULL, PING_PROBE, sync, (int)period_ms(), pr);
        }
        if (sync && d->swim_synced_at >= 0)
            d->swim_synced_at = d->swim_periods; /* asked: the next in SYNC_PERIODS */
    }
    /* seeds that are not members yet: every period until joined; then
     * the seed that answered, every period until its answers are quiet */
    for (int i = 0; i < d->n_peers; i++) {
        px_peer_t *p = &d->peers[i];
        int pull = d->swim_join_quiet < JOIN_QUIET && !strcmp(p->peer_addr, d->swim_seed);
        if (!p->joining && (pull || (!px_swim_find(d->swim, p->peer_addr) &&
                                     (d->swim_synced_at < 0 ||
                                      d->swim_periods % DEAD_RETRY_PERIODS == 0))))
            p->joining = send_ping(d, p, NULL, PING_SEED, 1, slow_ms(), NULL);
    }
    if (d->swim_periods % DEAD_RETRY_PERIODS == 0) {
        px_swim_member_t *m = px_swim_random_dead(d->swim);
        px_peer_t *p = m ? px_nodes_peer_by_addr(d, m->addr) : NULL;
        if (p)
            send_ping(d, p, NULL, PING_RETRY, 0, slow_ms(), NULL);
    }
    d->swim_timer.data = d;
    uv_timer_start(&d->swim_timer, on_half_period, (uint64_t)period_ms() / 2, 0);
}

static px_status_t swim_create(px_daemon_t *d)
{
    px_swim_config_t cfg = {.indirect_k = INDIRECT_K, .retransmit_mult = LAMBDA,
                            .max_piggyback = PIGGYBACK, .suspect_ms = 0,
                            .changed = on_member, .arg = d};
    uint64_t inc = (uint64_t)px_time_wall_ms() << BOOT_SHIFT;
    cfg.seed = inc ^ ((uint64_t)getpid() << 32) ^ 0x9e3779b97f4a7c15ull;
    d->swim = px_swim_new(&cfg, d->peer_addr, d->cfg.name, inc);
    if (!d->swim)
        return PX_ERR_NO_MEMORY;
    px_swim_set_suspect_ms(d->swim, suspect_ms(d));
    d->swim_synced_at = d->n_peers ? -1 : 0; /* no seed: a cluster of its own */
    d->swim_join_quiet = d->n_peers ? 0 : JOIN_QUIET;
    d->swim_seed[0] = '\0';
    return PX_OK;
}

void px_nodes_start(px_daemon_t *d)
{
    if (!d->swim && swim_create(d) != PX_OK) {
        px_error("membership: out of memory");
        return;
    }
    d->hb_timer.data = d;
    uv_timer_start(&d->hb_timer, on_period, 0, (uint64_t)period_ms());
}

void px_nodes_beat_now(px_daemon_t *d)
{
    Parallax__V1__NodeInfo self;
    if (d->stopping || !d->swim)
        return;
    self_facts(d, &self); /* a raised incarnation: gossiped on */
    px_nodes_info_free(&self);
    for (size_t i = 0; i < px_swim_count(d->swim); i++) {
        px_swim_member_t *m = px_swim_member(d->swim, i);
        px_peer_t *p = m->state != PX_SWIM_DEAD ? px_nodes_peer_by_addr(d, m->addr) : NULL;
        if (p)
            send_ping(d, p, NULL, PING_NOTIFY, 0, slow_ms(), NULL);
    }
}

void px_membership_fini(px_daemon_t *d)
{
    if (d->swim_probe && --d->swim_probe->refs <= 0)
        free(d->swim_probe); /* else freed by its last call's end */
    d->swim_probe = NULL;
    px_swim_free(d->swim);
    d->swim = NULL;
}

/* ------------------------------------------------------------- serving */

void px_membership_ping(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__HeartbeatRequest *req = (const void *)request;
    Parallax__V1__HeartbeatResponse resp = PARALLAX__V1__HEARTBEAT_RESPONSE__INIT;
    Parallax__V1__NodeInfo self;
    members_t g, all = {0};
    const char *from = req->node && req->node->peer_addr ? req->node->peer_addr : NULL;

    if (!d->swim) {
        px_rpc_call_fail(call, GRPC_STATUS_UNAVAILABLE, "node %s: membership not started",
                         d->cfg.name);
        return;
    }
    take_sender(d, req->node, req->incarnation);
    take_members(d, req->gossip, req->n_gossip, 0);
    self_facts(d, &self);
    gossip_for(d, from, &g);
    if (req->sync) {
        size_t n = px_swim_count(d->swim);
        px_swim_rumour_t *r = calloc(n ? n : 1, sizeof(*r));
        size_t k = 0;
        for (size_t i = 0; r && i < n; i++) {
            px_swim_member_t *m = px_swim_member(d->swim, i);
            if (!from || strcmp(m->addr, from))
                px_swim_rumour_of(m, &r[k++]);
        }
        if (r)
            to_members(r, k, &all);
        free(r);
    }
    resp.node = &self;
    resp.incarnation = px_swim_incarnation(d->swim);
    resp.gossip = g.ptrs;
    resp.n_gossip = g.n;
    resp.members = all.ptrs;
    resp.n_members = all.n;
    px_rpc_call_reply(call, &resp.base);
    free(g.ptrs);
    free(all.ptrs);
    px_nodes_info_free(&self);
}

static void on_relay_done(px_daemon_t *d, void *arg, grpc_status_code code, const char *message,
                          const ProtobufCMessage *response)
{
    px_rpc_call_t *call = arg;
    if (code == GRPC_STATUS_OK)
        px_rpc_call_reply(call, response);
    else
        px_rpc_call_fail(call, GRPC_STATUS_UNAVAILABLE, "node %s probed for you: %s",
                         d->cfg.name, message ? message : "no answer");
}

void px_membership_indirect(px_rpc_call_t *call, const ProtobufCMessage *request, void *arg)
{
    px_daemon_t *d = arg;
    const Parallax__V1__IndirectProbeRequest *req = (const void *)request;
    px_peer_t *p = req->target_addr ? px_nodes_peer_by_addr(d, req->target_addr) : NULL;

    if (!req->ping || !req->target_addr || !*req->target_addr) {
        px_rpc_call_fail(call, GRPC_STATUS_INVALID_ARGUMENT,
                         "IndirectProbe needs target_addr and ping");
        return;
    }
    if (!p) {
        px_rpc_call_fail(call, GRPC_STATUS_NOT_FOUND, "node %s knows no member at %s",
                         d->cfg.name, req->target_addr);
        return;
    }
    if (px_daemon_call_async(d, p->channel, P_PEER "Heartbeat", &req->ping->base,
                             &parallax__v1__heartbeat_response__descriptor,
                             (int)(period_ms() / 2), on_relay_done, call) != PX_OK)
        px_rpc_call_fail(call, GRPC_STATUS_UNAVAILABLE, "node %s could not probe %s",
                         d->cfg.name, req->target_addr);
}
