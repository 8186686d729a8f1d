/* test_swim.c: unit test of the SWIM state machine (swim.c) on a simulated
 * cluster: N state machines, one simulated clock (a protocol period of
 * 1000 ms), a network that loses each message with a given probability
 * (deterministic: its own xorshift). Each period every live node ticks,
 * pings its target (the ping and the ack carry piggybacked rumours), and
 * when no ack came asks k members to ping the target for it, as nodes.c
 * does over gRPC. Checked: precedence of rumours (SWIM 4.2), the
 * piggyback budget and retransmit count, convergence from one seed,
 * suspicion then death of a killed node at every member within the
 * suspicion timeout plus the dissemination time, refutation of a false
 * suspicion by a raised incarnation, and rejoin of a restarted node with a
 * higher incarnation within two periods at the nodes it pings. */
#include <stdio.h>
#include <string.h>

#include "px_check.h"
#include "swim.h"

#define NMAX 64
#define PERIOD 1000
#define SUSPECT_MS 4000
#define RUMOURS 8

typedef struct {
    px_swim_t *s;
    int up;
    char addr[32];
} node_t;

static node_t nodes[NMAX];
static int n_nodes;
static double loss;
static uint64_t net_rng = 88172645463325252ull;
static int64_t now;

static int changes; /* px_swim_changed_fn calls (the precedence test's node) */

static void on_change(void *arg, px_swim_member_t *m, px_swim_state_t old, uint64_t old_inc,
                      int is_new)
{
    (void)arg, (void)m, (void)old, (void)old_inc, (void)is_new;
    changes++;
}

static int lost(void)
{
    net_rng ^= net_rng << 13;
    net_rng ^= net_rng >> 7;
    net_rng ^= net_rng << 17;
    return (double)(net_rng % 1000000) / 1e6 < loss;
}

static px_swim_t *make(int i, uint64_t inc)
{
    px_swim_config_t cfg = {.indirect_k = 3, .retransmit_mult = 3, .max_piggyback = RUMOURS,
                            .suspect_ms = SUSPECT_MS, .seed = 1234 + (uint64_t)i,
                            .changed = on_change};
    char name[16];
    snprintf(nodes[i].addr, sizeof(nodes[i].addr), "127.0.0.1:%d", 20000 + i);
    snprintf(name, sizeof(name), "n%d", i);
    return px_swim_new(&cfg, nodes[i].addr, name, inc);
}

static int index_of(const char *addr)
{
    for (int i = 0; i < n_nodes; i++)
        if (!strcmp(nodes[i].addr, addr))
            return i;
    return -1;
}

/* One message from node a to node b: a's rumours (its own ALIVE first, as
 * a ping's NodeInfo is) taken by b. Returns 0 when lost or b is down. */
static int deliver(int a, int b)
{
    px_swim_rumour_t r[RUMOURS + 1];
    size_t n;
    const px_swim_member_t *self = px_swim_self(nodes[a].s);

    if (!nodes[a].up || !nodes[b].up || lost())
        return 0;
    r[0] = (px_swim_rumour_t){self->addr, self->name, self->incarnation, PX_SWIM_ALIVE, NULL, 0};
    n = px_swim_piggyback(nodes[a].s, nodes[b].addr, r + 1, RUMOURS);
    for (size_t i = 0; i <= n; i++)
        px_swim_apply(nodes[b].s, &r[i], now);
    return 1;
}

/* a pings b (ping, then b's ack): 1 if the ack reached a */
static int ping(int a, int b)
{
    return deliver(a, b) && deliver(b, a);
}

static void period(void)
{
    now += PERIOD;
    for (int a = 0; a < n_nodes; a++) {
        px_swim_member_t *t, *via[3];
        int b, k, acked;
        if (!nodes[a].up)
            continue;
        px_swim_expire(nodes[a].s, now);
        t = px_swim_tick(nodes[a].s);
        if (!t || (b = index_of(t->addr)) < 0)
            continue;
        if (ping(a, b))
            continue;
        acked = 0;
        k = px_swim_indirect(nodes[a].s, via, 3);
        for (int j = 0; j < k; j++) {
            int c = index_of(via[j]->addr);
            /* a -> c (request), c -> b (ping), b -> c (ack), c -> a (ack) */
            if (c >= 0 && deliver(a, c) && ping(c, b) && deliver(c, a))
                acked = 1;
        }
        if (!acked)
            px_swim_probe_failed(nodes[a].s, nodes[b].addr, t->incarnation, now);
    }
}

/* how node a sees node b: -1 unknown, else its state */
static int view(int a, int b)
{
    px_swim_member_t *m = px_swim_find(nodes[a].s, nodes[b].addr);
    return m ? (int)m->state : -1;
}

static int all_see(int b, int state)
{
    for (int a = 0; a < n_nodes; a++)
        if (a != b && nodes[a].up && view(a, b) != state)
            return 0;
    return 1;
}

static int converged(void)
{
    for (int b = 0; b < n_nodes; b++)
        if (nodes[b].up && !all_see(b, PX_SWIM_ALIVE))
            return 0;
    return 1;
}

static void cluster(int n, double p_loss)
{
    for (int i = 0; i < n_nodes; i++)
        px_swim_free(nodes[i].s);
    n_nodes = n;
    loss = p_loss;
    now = 0;
    for (int i = 0; i < n; i++) {
        nodes[i].s = make(i, 100);
        nodes[i].up = 1;
    }
}

static void test_precedence(void)
{
    px_swim_config_t cfg = {.indirect_k = 3, .retransmit_mult = 3, .max_piggyback = 4,
                            .suspect_ms = 5000, .seed = 7, .changed = on_change};
    px_swim_t *s = px_swim_new(&cfg, "me:1", "me", 10);
    px_swim_member_t *m = NULL;
    px_swim_rumour_t r = {"x:1", "x", 5, PX_SWIM_DEAD, NULL, 0};

    CHECK(px_swim_apply(s, &r, 0) == 0 && !px_swim_find(s, "x:1"),
          "a DEAD rumour of an unknown member is ignored");
    r.state = PX_SWIM_ALIVE;
    changes = 0;
    CHECK(px_swim_apply(s, &r, 0) == 1 && (m = px_swim_find(s, "x:1")) && changes == 1,
          "an ALIVE rumour adds the member, once reported");
    r.state = PX_SWIM_SUSPECT;
    CHECK(px_swim_apply(s, &r, 100) == 1 && m->state == PX_SWIM_SUSPECT &&
              m->suspect_since_ms == 100,
          "SUSPECT at the same incarnation overrides ALIVE");
    r.state = PX_SWIM_ALIVE;
    CHECK(px_swim_apply(s, &r, 200) == 0 && m->state == PX_SWIM_SUSPECT,
          "ALIVE at the same incarnation does not clear SUSPECT");
    r.incarnation = 6;
    CHECK(px_swim_apply(s, &r, 200) == 1 && m->state == PX_SWIM_ALIVE && m->incarnation == 6,
          "ALIVE at a higher incarnation clears SUSPECT");
    r.incarnation = 5;
    r.state = PX_SWIM_DEAD;
    CHECK(px_swim_apply(s, &r, 300) == 0 && m->state == PX_SWIM_ALIVE,
          "a stale DEAD (lower incarnation) is ignored");
    r.incarnation = 6;
    CHECK(px_swim_apply(s, &r, 300) == 1 && m->state == PX_SWIM_DEAD,
          "DEAD at the same incarnation overrides ALIVE");
    r.state = PX_SWIM_SUSPECT;
    CHECK(px_swim_apply(s, &r, 300) == 0 && m->state == PX_SWIM_DEAD,
          "SUSPECT does not revive a DEAD member");
    r.incarnation = 7;
    r.state = PX_SWIM_ALIVE;
    r.facts = (const uint8_t *)"abc";
    r.facts_len = 3;
    CHECK(px_swim_apply(s, &r, 400) == 1 && m->state == PX_SWIM_ALIVE && m->facts_len == 3 &&
              !memcmp(m->facts, "abc", 3),
          "a restarted member (higher incarnation) is alive again, with its facts");

    /* a failed probe of a life the member has left suspects nothing */
    px_swim_probe_failed(s, "x:1", 6, 450);
    CHECK(m->state == PX_SWIM_ALIVE, "a probe of incarnation 6 failing does not suspect 7");
    px_swim_probe_failed(s, "x:1", 7, 450);
    CHECK(m->state == PX_SWIM_SUSPECT && m->suspect_since_ms == 450,
          "a failed probe of the current incarnation suspects");
    r.incarnation = 8;
    px_swim_apply(s, &r, 460);

    /* refutation: a rumour that this node is suspect raises its incarnation */
    r = (px_swim_rumour_t){"me:1", "me", 10, PX_SWIM_SUSPECT, NULL, 0};
    CHECK(px_swim_apply(s, &r, 500) == 1 && px_swim_incarnation(s) == 11,
          "SUSPECT of this node at its incarnation 10 is refuted with 11, not %llu",
          (unsigned long long)px_swim_incarnation(s));
    r.incarnation = 5;
    CHECK(px_swim_apply(s, &r, 500) == 0 && px_swim_incarnation(s) == 11,
          "a stale rumour about this node changes nothing");
    {
        px_swim_rumour_t out[4];
        size_t n = px_swim_piggyback(s, "x:1", out, 4);
        int has_self = 0;
        for (size_t i = 0; i < n; i++)
            has_self |= !strcmp(out[i].addr, "me:1") && out[i].state == PX_SWIM_ALIVE &&
                        out[i].incarnation == 11;
        CHECK(has_self, "the refutation (ALIVE at 11) is gossiped");
    }
    CHECK(px_swim_set_facts(s, (const uint8_t *)"f1", 2) == 1 && px_swim_incarnation(s) == 12,
          "new facts raise the incarnation");
    CHECK(px_swim_set_facts(s, (const uint8_t *)"f1", 2) == 0 && px_swim_incarnation(s) == 12,
          "the same facts do not");
    px_swim_free(s);
}

/* px_swim_expire: each suspect dies when its own suspicion ends (not at
 * a period), and the next end is reported; px_swim_sample never picks
 * this node, the excluded member or a DEAD one. */
static void test_expire_and_sample(void)
{
    px_swim_t *s = make(0, 1);
    px_swim_member_t *pick[8];
    char addr[4][16];
    int counts[4] = {0};

    for (int i = 0; i < 4; i++) {
        px_swim_rumour_t r = {addr[i], "x", 1, PX_SWIM_ALIVE, NULL, 0};
        snprintf(addr[i], sizeof(addr[i]), "m:%d", i);
        px_swim_apply(s, &r, 0);
    }
    px_swim_set_suspect_ms(s, 1000);
    CHECK(px_swim_expire(s, 0) == -1, "no suspect: no suspicion to end");
    px_swim_probe_failed(s, "m:0", 1, 100);
    px_swim_probe_failed(s, "m:1", 1, 400);
    CHECK(px_swim_expire(s, 500) == 1100, "the next suspicion ends at 100 + 1000");
    CHECK(px_swim_expire(s, 1099) == 1100 && px_swim_find(s, "m:0")->state == PX_SWIM_SUSPECT,
          "not a millisecond early");
    CHECK(px_swim_expire(s, 1100) == 1400 && px_swim_find(s, "m:0")->state == PX_SWIM_DEAD &&
              px_swim_find(s, "m:1")->state == PX_SWIM_SUSPECT,
          "m:0 dead at 1100, m:1 next at 1400");
    CHECK(px_swim_expire(s, 1400) == -1 && px_swim_find(s, "m:1")->state == PX_SWIM_DEAD,
          "m:1 dead at 1400, no suspect left");

    /* members 2 and 3 alive: a sample of 8 has just them, never this node */
    CHECK(px_swim_sample(s, pick, 8, NULL) == 2, "two members not dead");
    CHECK(px_swim_sample(s, pick, 8, px_swim_find(s, "m:2")) == 1 &&
              !strcmp(pick[0]->addr, "m:3"),
          "the excluded member is not sampled");
    for (int i = 0; i < 400; i++) {
        CHECK(px_swim_sample(s, pick, 1, NULL) == 1, "one of one asked");
        counts[pick[0]->addr[2] - '0']++;
    }
    CHECK(counts[0] == 0 && counts[1] == 0 && counts[2] > 120 && counts[3] > 120,
          "uniform over the live members: %d %d %d %d", counts[0], counts[1], counts[2],
          counts[3]);
    px_swim_free(s);

    /* a full-state sync's members are taken, not gossiped on; a change of
     * a known member from it is */
    s = make(0, 1);
    {
        px_swim_rumour_t r = {"m:9", "x", 4, PX_SWIM_ALIVE, NULL, 0};
        CHECK(px_swim_merge(s, &r, 0) == 1 && px_swim_find(s, "m:9") && !px_swim_pending(s),
              "a member new from a sync is known, and not queued as gossip");
        r.state = PX_SWIM_DEAD;
        CHECK(px_swim_merge(s, &r, 0) == 1 && px_swim_pending(s),
              "its death learned from a sync is gossiped");
    }
    px_swim_free(s);
}

static void test_piggyback_budget(void)
{
    px_swim_config_t cfg = {.indirect_k = 3, .retransmit_mult = 2, .max_piggyback = 5,
                            .suspect_ms = 5000, .seed = 9};
    px_swim_t *s = px_swim_new(&cfg, "me:1", "me", 1);
    px_swim_rumour_t out[16];
    int sent[40] = {0}, total = 0, per, rounds = 0;
    char addr[32];

    for (int i = 0; i < 40; i++) {
        px_swim_rumour_t r = {addr, "m", 1, PX_SWIM_ALIVE, NULL, 0};
        snprintf(addr, sizeof(addr), "m:%d", i);
        px_swim_apply(s, &r, 0);
    }
    per = px_swim_retransmits(s, 41);
    CHECK(per == 2 * 6, "lambda 2, 41 members: 2*ceil(log2 42) = 12 transmissions, not %d", per);
    for (;;) {
        size_t n = px_swim_piggyback(s, NULL, out, 16);
        if (!n)
            break;
        rounds++;
        CHECK(n <= 5, "a message carries at most max_piggyback 5 rumours, not %zu", n);
        for (size_t i = 0; i < n; i++) {
            int k;
            for (size_t j = 0; j < i; j++)
                CHECK(strcmp(out[i].addr, out[j].addr), "a rumour twice in one message");
            if (sscanf(out[i].addr, "m:%d", &k) == 1 && k >= 0 && k < 40)
                sent[k]++;
            total++;
        }
        if (rounds > 1000)
            break;
    }
    for (int i = 0; i < 40; i++)
        CHECK(sent[i] == per, "member %d gossiped %d times, not lambda*ceil(log2(N+1)) = %d", i,
              sent[i], per);
    CHECK(rounds < 1000, "the queue drains");
    {
        /* the newest rumour goes first */
        px_swim_rumour_t r = {"new:1", "new", 1, PX_SWIM_ALIVE, NULL, 0};
        size_t n;
        px_swim_apply(s, &r, 0);
        n = px_swim_piggyback(s, NULL, out, 16);
        CHECK(n >= 1 && !strcmp(out[0].addr, "new:1"), "the newest rumour is sent first");
    }
    px_swim_free(s);
}

static void test_cluster(void)
{
    int n = 32, p, killed = 7, restarted_at;
    cluster(n, 0.05);
    /* every node but 0 knows only the seed, which learns it from its ping */
    for (int i = 1; i < n; i++) {
        px_swim_rumour_t r = {nodes[0].addr, "n0", 100, PX_SWIM_ALIVE, NULL, 0};
        px_swim_apply(nodes[i].s, &r, 0);
        deliver(i, 0);
    }
    for (p = 0; p < 60 && !converged(); p++)
        period();
    CHECK(converged(), "32 nodes from one seed, 5%% loss: converged in %d periods", p);
    printf("converged in %d periods\n", p);

    /* a killed node: SUSPECT, then DEAD at every member */
    nodes[killed].up = 0;
    for (p = 0; p < 60 && !all_see(killed, PX_SWIM_DEAD); p++)
        period();
    CHECK(all_see(killed, PX_SWIM_DEAD), "the killed node dead everywhere after %d periods", p);
    CHECK(p * PERIOD <= SUSPECT_MS + 12 * PERIOD,
          "detection at every member within the suspicion timeout (%d ms) + 12 periods: %d "
          "periods", SUSPECT_MS, p);
    printf("killed node dead at every member after %d periods\n", p);
    for (int b = 0; b < n; b++)
        CHECK(b == killed || all_see(b, PX_SWIM_ALIVE), "live node %d not alive everywhere", b);

    /* restarted with a higher incarnation (nodes.c: the wall clock), it
     * pings the seed and then every member (nodes.c's announce) */
    px_swim_free(nodes[killed].s);
    nodes[killed].s = make(killed, 100000);
    nodes[killed].up = 1;
    {
        px_swim_rumour_t r = {nodes[0].addr, "n0", 100, PX_SWIM_ALIVE, NULL, 0};
        px_swim_apply(nodes[killed].s, &r, now);
    }
    loss = 0;
    restarted_at = 0;
    ping(killed, 0);
    CHECK(view(0, killed) == PX_SWIM_ALIVE, "the seed sees the restarted node alive at once");
    for (p = 0; p < 20 && !all_see(killed, PX_SWIM_ALIVE); p++) {
        period();
        restarted_at++;
    }
    CHECK(all_see(killed, PX_SWIM_ALIVE), "the restarted node alive everywhere by gossip");
    printf("restarted node alive at every member after %d periods (gossip alone)\n",
           restarted_at);

    /* a false suspicion: node 3 told it is suspect refutes it */
    {
        const px_swim_member_t *m3 = px_swim_find(nodes[0].s, nodes[3].addr);
        px_swim_rumour_t r = {nodes[3].addr, "n3", m3->incarnation, PX_SWIM_SUSPECT, NULL, 0};
        uint64_t before = px_swim_incarnation(nodes[3].s);
        px_swim_apply(nodes[0].s, &r, now);
        CHECK(view(0, 3) == PX_SWIM_SUSPECT, "node 0 suspects node 3");
        for (p = 0; p < 3 && view(0, 3) != PX_SWIM_ALIVE; p++)
            period();
        for (p = 0; p < 20 && !all_see(3, PX_SWIM_ALIVE); p++)
            period();
        CHECK(px_swim_incarnation(nodes[3].s) > before, "node 3 raised its incarnation");
        CHECK(all_see(3, PX_SWIM_ALIVE), "node 3's refutation reached everyone");
        now += SUSPECT_MS;
        period();
        CHECK(all_see(3, PX_SWIM_ALIVE), "refuted: nobody declares node 3 dead");
    }
    /* every live node stays alive at every member with 5% loss (false
     * suspicions refuted in time) */
    loss = 0.05;
    for (p = 0; p < 100; p++)
        period();
    CHECK(converged(), "100 periods of 5%% loss: no live node declared dead");
}

int main(void)
{
    test_precedence();
    test_expire_and_sample();
    test_piggyback_budget();
    test_cluster();
    for (int i = 0; i < n_nodes; i++)
        px_swim_free(nodes[i].s);
    if (fails)
        fprintf(stderr, "%d failures\n", fails);
    return fails ? 1 : 0;
}
