/* swim.c: the SWIM state machine (swim.h). Members live in an array of
 * pointers (each allocated once, so a caller's pointer stays valid); the
 * probe order is a second array of the same pointers, shuffled at the
 * start of every round (Fisher-Yates over xorshift64). The rumour queue is
 * each member's `queued` and `transmits`: no separate list, so a newer
 * rumour about a member replaces its older one, as memberlist's queue
 * does, and its limit follows the cluster's size as it grows. */
#include "swim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct px_swim {
    px_swim_config_t cfg;
    px_swim_member_t self;
    px_swim_member_t **m;     /* the other members */
    size_t n, cap;
    px_swim_member_t **order; /* the probe round: order[0, n_order) */
    size_t n_order, next;
    px_swim_member_t *target; /* this period's, NULL none */
    uint64_t rng;
    uint64_t seq;             /* queueing order */
};

static uint64_t rnd(px_swim_t *s)
{
    uint64_t x = s->rng; /* xorshift64 (Marsaglia 2003) */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return s->rng = x;
}

const char *px_swim_state_name(px_swim_state_t st)
{
    return st == PX_SWIM_ALIVE ? "alive" : st == PX_SWIM_SUSPECT ? "suspect" : "dead";
}

px_swim_t *px_swim_new(const px_swim_config_t *cfg, const char *addr, const char *name,
                       uint64_t incarnation)
{
    px_swim_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->cfg = *cfg;
    if (s->cfg.indirect_k < 0)
        s->cfg.indirect_k = 0;
    if (s->cfg.retransmit_mult < 1)
        s->cfg.retransmit_mult = 1;
    if (s->cfg.max_piggyback < 1)
        s->cfg.max_piggyback = 1;
    s->rng = cfg->seed ? cfg->seed : 0x9e3779b97f4a7c15ull;
    snprintf(s->self.addr, sizeof(s->self.addr), "%s", addr);
    snprintf(s->self.name, sizeof(s->self.name), "%s", name);
    s->self.incarnation = incarnation ? incarnation : 1;
    return s;
}

void px_swim_free(px_swim_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->m[i]->facts);
        free(s->m[i]);
    }
    free(s->m);
    free(s->order);
    free(s->self.facts);
    free(s);
}

uint64_t px_swim_incarnation(const px_swim_t *s)
{
    return s->self.incarnation;
}

const px_swim_member_t *px_swim_self(const px_swim_t *s)
{
    return &s->self;
}

size_t px_swim_count(const px_swim_t *s)
{
    return s->n;
}

px_swim_member_t *px_swim_member(px_swim_t *s, size_t i)
{
    return i < s->n ? s->m[i] : NULL;
}

px_swim_member_t *px_swim_find(px_swim_t *s, const char *addr)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->m[i]->addr, addr))
            return s->m[i];
    return NULL;
}

int px_swim_retransmits(const px_swim_t *s, size_t n)
{
    int log2n = 0;
    while (((size_t)1 << log2n) < n + 1)
        log2n++;
    return s->cfg.retransmit_mult * (log2n ? log2n : 1);
}

/* Queues m's current state to be gossiped. */
static void enqueue(px_swim_t *s, px_swim_member_t *m)
{
    m->queued = 1;
    m->transmits = 0;
    m->queued_seq = ++s->seq;
}

static int set_facts(px_swim_member_t *m, const uint8_t *facts, size_t len)
{
    uint8_t *copy;
    if (!facts || !len)
        return 0;
    if (m->facts && m->facts_len == len && !memcmp(m->facts, facts, len))
        return 0;
    copy = malloc(len);
    if (!copy)
        return -1;
    memcpy(copy, facts, len);
    free(m->facts);
    m->facts = copy;
    m->facts_len = len;
    return 1;
}

int px_swim_set_facts(px_swim_t *s, const uint8_t *facts, size_t len)
{
    int r = set_facts(&s->self, facts, len);
    if (r == 1) {
        s->self.incarnation++;
        enqueue(s, &s->self);
    }
    return r;
}

/* Puts m into this round's probe order at a random place not yet passed
 * (memberlist does the same), so a new member is probed within the round. */
static int order_insert(px_swim_t *s, px_swim_member_t *m)
{
    size_t at;
    px_swim_member_t **o = realloc(s->order, sizeof(*o) * (s->n_order + 1));
    if (!o)
        return -1;
    s->order = o;
    at = s->next + (size_t)(rnd(s) % (s->n_order - s->next + 1));
    memmove(&o[at + 1], &o[at], sizeof(*o) * (s->n_order - at));
    o[at] = m;
    s->n_order++;
    return 0;
}

static px_swim_member_t *member_add(px_swim_t *s, const px_swim_rumour_t *r)
{
    px_swim_member_t *m;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        px_swim_member_t **a = realloc(s->m, sizeof(*a) * cap);
        if (!a)
            return NULL;
        s->m = a;
        s->cap = cap;
    }
    m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    snprintf(m->addr, sizeof(m->addr), "%s", r->addr);
    if (order_insert(s, m) != 0) {
        free(m);
        return NULL;
    }
    s->m[s->n++] = m;
    return m;
}

/* A rumour that this node is not alive (or alive at an incarnation it
 * never had): raise the incarnation above it and spread ALIVE. */
static int refute(px_swim_t *s, const px_swim_rumour_t *r)
{
    if (r->state == PX_SWIM_ALIVE ? r->incarnation <= s->self.incarnation
                                  : r->incarnation < s->self.incarnation)
        return 0;
    s->self.incarnation = r->incarnation + 1;
    enqueue(s, &s->self);
    return 1;
}

static int apply(px_swim_t *s, const px_swim_rumour_t *r, int64_t now_ms, int merge);

int px_swim_apply(px_swim_t *s, const px_swim_rumour_t *r, int64_t now_ms)
{
    return apply(s, r, now_ms, 0);
}

int px_swim_merge(px_swim_t *s, const px_swim_rumour_t *r, int64_t now_ms)
{
    return apply(s, r, now_ms, 1);
}

static int apply(px_swim_t *s, const px_swim_rumour_t *r, int64_t now_ms, int merge)
{
    px_swim_member_t *m;
    px_swim_state_t old;
    uint64_t old_inc;
    int is_new = 0, facts;

    if (!r->addr || !*r->addr)
        return 0;
    if (!strcmp(r->addr, s->self.addr))
        return refute(s, r);
    m = px_swim_find(s, r->addr);
    if (!m) {
        if (r->state != PX_SWIM_ALIVE)
            return 0; /* never known alive here: nothing to fail */
        if (!(m = member_add(s, r)))
            return -1;
        is_new = 1;
        m->state = PX_SWIM_DEAD; /* replaced below */
    } else {
        /* SWIM 4.2's precedence: a higher incarnation wins; at an equal one
         * SUSPECT overrides ALIVE and DEAD overrides both */
        if (r->incarnation < m->incarnation)
            return 0;
        if (r->incarnation == m->incarnation && r->state <= m->state)
            return 0;
    }
    old = m->state;
    old_inc = m->incarnation;
    if (r->name && *r->name)
        snprintf(m->name, sizeof(m->name), "%s", r->name);
    m->incarnation = r->incarnation;
    m->state = r->state;
    if (r->state == PX_SWIM_SUSPECT && (old != PX_SWIM_SUSPECT || is_new))
        m->suspect_since_ms = now_ms;
    facts = r->state == PX_SWIM_ALIVE ? set_facts(m, r->facts, r->facts_len) : 0;
    if (facts < 0)
        return -1;
    if (!merge || !is_new)
        enqueue(s, m);
    if (s->cfg.changed)
        s->cfg.changed(s->cfg.arg, m, old, old_inc, is_new);
    return 1;
}

/* Marks m SUSPECT (our own probe failed) and gossips it. */
static void suspect(px_swim_t *s, px_swim_member_t *m, int64_t now_ms)
{
    px_swim_state_t old = m->state;
    if (m->state != PX_SWIM_ALIVE)
        return;
    m->state = PX_SWIM_SUSPECT;
    m->suspect_since_ms = now_ms;
    enqueue(s, m);
    if (s->cfg.changed)
        s->cfg.changed(s->cfg.arg, m, old, m->incarnation, 0);
}

void px_swim_probe_failed(px_swim_t *s, const char *addr, uint64_t incarnation, int64_t now_ms)
{
    px_swim_member_t *m = px_swim_find(s, addr);
    if (m && m->incarnation == incarnation)
        suspect(s, m, now_ms);
}

int64_t px_swim_expire(px_swim_t *s, int64_t now_ms)
{
    int64_t next = -1;
    for (size_t i = 0; i < s->n; i++) {
        px_swim_member_t *m = s->m[i];
        int64_t at = m->suspect_since_ms + s->cfg.suspect_ms;
        if (m->state != PX_SWIM_SUSPECT)
            continue;
        if (now_ms >= at) {
            m->state = PX_SWIM_DEAD;
            enqueue(s, m);
            if (s->cfg.changed)
                s->cfg.changed(s->cfg.arg, m, PX_SWIM_SUSPECT, m->incarnation, 0);
        } else if (next < 0 || at < next) {
            next = at;
        }
    }
    return next;
}

px_swim_member_t *px_swim_tick(px_swim_t *s)
{
    s->target = NULL;
    /* the next member of the round not DEAD; a new round when it ends */
    for (size_t tries = 0; tries <= 2 * s->n_order && s->n_order; tries++) {
        px_swim_member_t *m;
        if (s->next >= s->n_order) {
            for (size_t i = s->n_order - 1; i > 0; i--) {
                size_t j = (size_t)(rnd(s) % (i + 1));
                px_swim_member_t *t = s->order[i];
                s->order[i] = s->order[j];
                s->order[j] = t;
            }
            s->next = 0;
        }
        m = s->order[s->next++];
        if (m->state != PX_SWIM_DEAD) {
            s->target = m;
            return m;
        }
    }
    return NULL;
}

px_swim_member_t *px_swim_target(px_swim_t *s)
{
    return s->target;
}

int px_swim_pending(const px_swim_t *s)
{
    if (s->self.queued)
        return 1;
    for (size_t i = 0; i < s->n; i++)
        if (s->m[i]->queued)
            return 1;
    return 0;
}

void px_swim_set_suspect_ms(px_swim_t *s, int64_t ms)
{
    s->cfg.suspect_ms = ms;
}

int px_swim_sample(px_swim_t *s, px_swim_member_t **out, int max,
                   const px_swim_member_t *except)
{
    int k = 0, seen = 0;
    /* reservoir sampling over the candidates (Vitter's algorithm R) */
    for (size_t i = 0; i < s->n && max > 0; i++) {
        px_swim_member_t *m = s->m[i];
        if (m == except || m->state == PX_SWIM_DEAD)
            continue;
        seen++;
        if (k < max)
            out[k++] = m;
        else {
            uint64_t j = rnd(s) % (uint64_t)seen;
            if (j < (uint64_t)max)
                out[j] = m;
        }
    }
    return k;
}

int px_swim_indirect(px_swim_t *s, px_swim_member_t **out, int max)
{
    return px_swim_sample(s, out, max > s->cfg.indirect_k ? s->cfg.indirect_k : max, s->target);
}

void px_swim_rumour_of(const px_swim_member_t *m, px_swim_rumour_t *r)
{
    r->addr = m->addr;
    r->name = m->name;
    r->incarnation = m->incarnation;
    r->state = m->state;
    r->facts = m->state == PX_SWIM_ALIVE ? m->facts : NULL;
    r->facts_len = m->state == PX_SWIM_ALIVE ? m->facts_len : 0;
}

size_t px_swim_piggyback(px_swim_t *s, const char *to_addr, px_swim_rumour_t *out, size_t max)
{
    size_t k = 0, n_taken = 0;
    px_swim_member_t *to = to_addr ? px_swim_find(s, to_addr) : NULL;
    px_swim_member_t *taken[64];
    int limit = px_swim_retransmits(s, s->n + 1);

    if (max > (size_t)s->cfg.max_piggyback)
        max = (size_t)s->cfg.max_piggyback;
    if (max > sizeof(taken) / sizeof(taken[0]))
        max = sizeof(taken) / sizeof(taken[0]);
    if (to && to->state != PX_SWIM_ALIVE && k < max)
        px_swim_rumour_of(to, &out[k++]);
    while (k < max) {
        /* the newest queued rumour not yet in this message */
        px_swim_member_t *best = NULL;
        for (size_t i = 0; i <= s->n; i++) {
            px_swim_member_t *m = i < s->n ? s->m[i] : &s->self;
            int in = 0;
            if (!m->queued || m == to)
                continue;
            for (size_t j = 0; j < n_taken && !in; j++)
                in = taken[j] == m;
            if (!in && (!best || m->queued_seq > best->queued_seq))
                best = m;
        }
        if (!best)
            break;
        px_swim_rumour_of(best, &out[k++]);
        taken[n_taken++] = best;
        if (++best->transmits >= limit)
            best->queued = 0;
    }
    return k;
}

px_swim_member_t *px_swim_random_dead(px_swim_t *s)
{
    px_swim_member_t *pick = NULL;
    uint64_t seen = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->m[i]->state == PX_SWIM_DEAD && rnd(s) % ++seen == 0)
            pick = s->m[i];
    return pick;
}
