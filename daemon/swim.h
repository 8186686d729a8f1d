/* swim.h: cluster membership by gossip, the state machine of SWIM
 * (A. Das, I. Gupta, A. Motivala, "SWIM: Scalable Weakly-consistent
 * Infection-style Process Group Membership Protocol", DSN 2002), with the
 * suspicion and incarnation numbers of its section 4.2 and the
 * infection-style dissemination of section 4.1, as hashicorp's memberlist
 * and Tarantool's swim run it.
 *
 * Pure: no I/O, no clock, no threads. The caller (membership.c) passes
 * the time in (ms, any monotonic clock), sends the messages it is told to
 * send, and feeds back what arrived; so the unit test drives it with a
 * simulated clock and simulated loss (daemon/tests/test_swim.c).
 *
 * The caller calls px_swim_expire when a suspicion ends (suspects older
 * than the suspicion timeout become DEAD), and each protocol period
 * px_swim_tick: the next target is chosen in a randomised round-robin
 * over the members (each is probed once per round, the order shuffled
 * every round, SWIM section 4.3). The caller pings the target; when no
 * ack came within its probe timeout it asks px_swim_indirect's k members
 * to ping it for it; with no ack at all it calls px_swim_probe_failed
 * (the target becomes SUSPECT). Every ping and ack carries up to
 * max_piggyback rumours (px_swim_piggyback): a member's (state,
 * incarnation, facts), each sent retransmit_mult * ceil(log2(N+1)) times,
 * newest first; px_swim_apply takes the rumours a message brought.
 * A rumour that this node is SUSPECT or DEAD is refuted by raising its own
 * incarnation above it and spreading ALIVE.
 *
 * Members are keyed by their peer address (unique per daemon); the name is
 * carried along. "facts" are opaque bytes about a member (membership.c: its
 * packed NodeInfo) spread with its ALIVE rumours: a node that changes its
 * facts raises its incarnation (px_swim_set_facts), as memberlist does with
 * a node's metadata. Incarnations start at the caller's choice (membership.c:
 * the wall clock in ms at start, so a restarted node outranks every rumour
 * of its previous life without keeping state). */
#ifndef PX_SWIM_H
#define PX_SWIM_H

#include <stddef.h>
#include <stdint.h>

#define PX_SWIM_ADDR_MAX 256
#define PX_SWIM_NAME_MAX 64

typedef enum { PX_SWIM_ALIVE = 0, PX_SWIM_SUSPECT = 1, PX_SWIM_DEAD = 2 } px_swim_state_t;

/* What a message says about one member; every pointer borrowed. */
typedef struct {
    const char *addr;
    const char *name;
    uint64_t incarnation;
    px_swim_state_t state;
    const uint8_t *facts; /* NULL/0: none carried */
    size_t facts_len;
} px_swim_rumour_t;

/* A member as this node knows it (owned by the px_swim_t; the pointer
 * stays valid until px_swim_free). */
typedef struct px_swim_member {
    char addr[PX_SWIM_ADDR_MAX];
    char name[PX_SWIM_NAME_MAX];
    uint64_t incarnation;
    px_swim_state_t state;
    int64_t suspect_since_ms; /* when this node began to suspect it */
    uint8_t *facts;
    size_t facts_len;
    int queued;               /* its state is to be piggybacked (a rumour) */
    int transmits;            /* times piggybacked since queued; done at
                               * px_swim_retransmits(N now), as memberlist */
    uint64_t queued_seq;      /* order of queueing: newest rumours go first */
    void *user;               /* the caller's (nodes.c: its px_peer_t index + 1) */
} px_swim_member_t;

typedef struct px_swim px_swim_t;

/* Called for every change of a member other than this node: new, state,
 * incarnation or facts; `old` and `old_incarnation` are its state and
 * incarnation before (`is_new`: none). */
typedef void (*px_swim_changed_fn)(void *arg, px_swim_member_t *m, px_swim_state_t old,
                                   uint64_t old_incarnation, int is_new);

typedef struct {
    int indirect_k;        /* members asked to probe indirectly (SWIM's k; 3) */
    int retransmit_mult;   /* lambda: each rumour is sent lambda*ceil(log2(N+1)) times */
    int max_piggyback;     /* rumours a message carries at most */
    int64_t suspect_ms;    /* a suspect not refuted this long is DEAD */
    uint64_t seed;         /* the shuffles' random seed (nonzero) */
    px_swim_changed_fn changed;
    void *arg;
} px_swim_config_t;

/* A new state machine for this node (`addr`, `name`) at `incarnation`
 * (> 0); NULL when out of memory. */
px_swim_t *px_swim_new(const px_swim_config_t *cfg, const char *addr, const char *name,
                       uint64_t incarnation);
void px_swim_free(px_swim_t *s);

/* This node's incarnation and its entry (state always ALIVE). */
uint64_t px_swim_incarnation(const px_swim_t *s);
const px_swim_member_t *px_swim_self(const px_swim_t *s);

/* Sets this node's facts (copied); when they differ from the last ones
 * its incarnation rises and the change is gossiped. Returns 1 if changed,
 * 0 if not, -1 out of memory. */
int px_swim_set_facts(px_swim_t *s, const uint8_t *facts, size_t len);

/* Takes one rumour from a message received at now_ms. Returns 1 when it
 * changed what this node knows (it is then gossiped on), 0 when stale or
 * about an unknown member that is not ALIVE, -1 out of memory. A rumour
 * about this node that is not ALIVE at or above its incarnation is refuted. */
int px_swim_apply(px_swim_t *s, const px_swim_rumour_t *r, int64_t now_ms);

/* px_swim_apply for a rumour from a full-state sync (another member's
 * whole table): a member new to this node is taken but not queued as
 * gossip, since the member that answered knows it and spreads its own
 * news (a joining node would otherwise gossip the whole cluster to the
 * cluster, each member lambda*log2(N+1) times). Any other change is
 * gossiped as px_swim_apply's. Returns as px_swim_apply. */
int px_swim_merge(px_swim_t *s, const px_swim_rumour_t *r, int64_t now_ms);

/* Declares DEAD the suspects whose suspicion began suspect_ms or more
 * before now_ms; returns when the next suspect's suspicion ends (ms, on
 * the clock of now_ms), -1 when no other member is SUSPECT. The caller
 * runs it again then, so a death is declared when due, not at the next
 * period. */
int64_t px_swim_expire(px_swim_t *s, int64_t now_ms);

/* Begins a protocol period: returns the member to probe in it (NULL: no
 * other member is ALIVE or SUSPECT). Deaths are px_swim_expire's, which
 * the caller runs first. */
px_swim_member_t *px_swim_tick(px_swim_t *s);

/* The probe of the member at `addr`, sent while it was at `incarnation`,
 * got no ack, neither directly nor through px_swim_indirect's members: it
 * becomes SUSPECT at now_ms unless it has moved to a higher incarnation
 * meanwhile (a restarted node is not suspected for its previous life's
 * silence). The caller decides once every call of that probe has ended,
 * not at the next tick, so an ack a loaded node has not read yet is not
 * taken for none. */
void px_swim_probe_failed(px_swim_t *s, const char *addr, uint64_t incarnation, int64_t now_ms);

/* This period's target (NULL: none). */
px_swim_member_t *px_swim_target(px_swim_t *s);

/* 1 if some rumour is still queued for transmission. */
int px_swim_pending(const px_swim_t *s);

/* Changes the suspicion timeout (ms), e.g. as the cluster grows. */
void px_swim_set_suspect_ms(px_swim_t *s, int64_t ms);

/* Up to `max` members (not this node, not the target, not DEAD) chosen at
 * random to probe this period's target indirectly; returns how many. */
int px_swim_indirect(px_swim_t *s, px_swim_member_t **out, int max);

/* Up to `max` members (not this node, not `except`, not DEAD) chosen
 * uniformly at random into out; returns how many. */
int px_swim_sample(px_swim_t *s, px_swim_member_t **out, int max,
                   const px_swim_member_t *except);

/* Fills out[0, max) with the rumours a message to `to_addr` carries: first
 * this node's view of the recipient itself when that is SUSPECT or DEAD
 * (so it can refute at once), then the queued rumours, newest first, each
 * counted as one transmission. Pointers borrow the members' storage (valid
 * until the next call that changes the state machine). Returns the count,
 * at most max and cfg.max_piggyback. */
size_t px_swim_piggyback(px_swim_t *s, const char *to_addr, px_swim_rumour_t *out, size_t max);

/* A random DEAD member, to be tried now and then so that a partition
 * heals (NULL if none). */
px_swim_member_t *px_swim_random_dead(px_swim_t *s);

/* Every member but this node: count and the i-th (any order). */
size_t px_swim_count(const px_swim_t *s);
px_swim_member_t *px_swim_member(px_swim_t *s, size_t i);
px_swim_member_t *px_swim_find(px_swim_t *s, const char *addr);

/* The rumour stating member `m` as known here (for a full-state sync). */
void px_swim_rumour_of(const px_swim_member_t *m, px_swim_rumour_t *r);

/* The transmissions a rumour gets in a cluster of n members. */
int px_swim_retransmits(const px_swim_t *s, size_t n);

const char *px_swim_state_name(px_swim_state_t st);

#endif
