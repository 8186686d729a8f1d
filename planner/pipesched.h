/* pipesched.h: pipeline-parallel schedules as data.
 *
 * A schedule is, for each stage s of p, a list of actions over the M
 * micro-batches of one pipeline round: forward m, backward m, and the
 * point-to-point messages between neighbouring stages (the activation of m
 * goes from stage s to s+1 after its forward, its gradient from s+1 back to
 * s after its backward). One function per schedule builds the lists; the
 * engine's runner (engine/pipeline.h) executes any of them, this file's
 * checker simulates them (deadlock freedom, forward before backward) and
 * prints them, without running a model.
 *
 * The runner's semantics, which the checker simulates:
 *   RECV_ACT m / RECV_GRAD m post a nonblocking receive (into micro-batch
 *   m's activation slot / residual-gradient buffer); SEND_ACT m /
 *   SEND_GRAD m post a nonblocking send and go on; FWD m waits for the
 *   receive of m's activation (stages > 0), BWD m for the receive of m's
 *   gradient (stages < p-1). A micro-batch occupies a slot from FWD to BWD;
 *   a slot is reused only once the gradient send of its previous occupant
 *   completed (the send buffer is the slot's), and a send completes once
 *   the peer posted the matching receive. With chunks (interleaved) all
 *   of this holds per (stage, chunk) = virtual stage: its own slots, its
 *   messages to and from the neighbouring virtual stages.
 *
 * Sources: GPipe (Huang et al., "GPipe: Efficient Training of Giant Neural
 * Networks using Pipeline Parallelism", 2019): all forwards, then all
 * backwards. 1F1B (Narayanan et al., "Efficient Large-Scale Language Model
 * Training on GPU Clusters Using Megatron-LM", 2021, section 2.2; PipeDream-
 * Flush): stage s runs min(p-s-1, M) warm-up forwards, then alternates one
 * forward and one backward, then drains the remaining backwards; at most
 * p - s micro-batches are in flight on stage s. ZB-H1 (Qi et al., "Zero
 * Bubble Pipeline Parallelism", 2024): 1F1B with each backward split into
 * B (input gradient, sent on at once) and W (weight gradient); stage s
 * keeps up to s W passes pending (the oldest runs when more are), the rest
 * run at the end, so the previous stage waits for B only and the W passes
 * fill the cool-down bubble: bubble (p-1)(F+B-W), at most p micro-batches
 * in flight per stage. A micro-batch holds its slot until its W (split
 * schedules), else until its BWD.
 *
 * Interleaved 1F1B (Narayanan et al. 2021, section 2.2.2; Megatron-LM's
 * forward_backward_pipelining_with_interleaving): each of the p ranks
 * holds V model chunks; chunk c of rank r is virtual stage j = c*p + r
 * (rank r holds virtual stages r, r+p, ..., r+(V-1)p), and the activation
 * of a micro-batch runs through the pV virtual stages in order, so it
 * goes round the ranks V times. Every action carries its chunk; a message
 * goes from virtual stage j to j+1 (activation) or j+1 to j (gradient),
 * i.e. between rank r and rank (r+1) mod p. Each rank runs the forwards
 * of (micro-batch, chunk) in groups of p micro-batches (group g:
 * micro-batches [gp, gp+p) through chunk 0, then the same through chunk
 * 1, ...; a last group of fewer than p when p does not divide M), the
 * backwards in the same order with the chunks reversed; warm-up
 * (p-r-1)*2 + (V-1)*p forwards (at most MV), then one forward one
 * backward, then the remaining backwards. The gradient receive of a
 * (micro-batch, chunk) is posted right after its activation send (not
 * right before its backward): a rank's chunks send each other's
 * neighbours work in both directions, and a slot is reused only once its
 * previous occupant's gradient send completed, which with late receives
 * deadlocks (p=2, M=4, V=2). Bubble (p-1)/(V*M) of the ideal time where
 * 1F1B has (p-1)/M (the paper's (p-1)/(V*M+p-1) as an idle fraction), at
 * about the activations of 1F1B's first stage plus (V-1)p micro-batch
 * chunks.
 *
 * Pure code, no allocation besides the lists; any thread. */
#ifndef PX_PIPESCHED_H
#define PX_PIPESCHED_H

#include <stddef.h>
#include <stdio.h>

#include "px_status.h"

typedef enum px_pipe_schedule_kind {
    PX_PIPE_GPIPE = 0,
    PX_PIPE_1F1B,
    PX_PIPE_ZB1,
    PX_PIPE_INTERLEAVED,
    PX_PIPE_NKINDS
} px_pipe_schedule_kind_t;

typedef enum px_pipe_op {
    PX_PIPE_FWD = 0,   /* forward of micro-batch m through this stage's units */
    PX_PIPE_BWD,       /* backward of m (input and weight gradients) */
    PX_PIPE_SEND_ACT,  /* m's output activation to stage s+1 */
    PX_PIPE_RECV_ACT,  /* m's input activation from stage s-1 */
    PX_PIPE_SEND_GRAD, /* m's input gradient to stage s-1 */
    PX_PIPE_RECV_GRAD, /* m's output gradient from stage s+1 */
    PX_PIPE_WGT,       /* split backward (ZB1): m's weight gradients; BWD is
                          then the input-gradient pass only */
    PX_PIPE_NOPS
} px_pipe_op_t;

typedef struct px_pipe_action {
    int op;    /* px_pipe_op_t */
    int micro; /* 0 .. M-1 */
    int chunk; /* the rank's model chunk 0 .. V-1 (0 unless interleaved) */
} px_pipe_action_t;

/* One stage's (rank's) list. */
typedef struct px_pipe_list {
    px_pipe_action_t *a; /* owned by the schedule */
    int n;
} px_pipe_list_t;

/* The lists of every stage of one pipeline round: p ranks, m
 * micro-batches, v model chunks per rank (1 unless interleaved). */
typedef struct px_pipe_schedule {
    int kind, p, m, v;
    px_pipe_list_t *stage; /* [p] */
} px_pipe_schedule_t;

/* "gpipe" / "1f1b" / "zb1" / "interleaved" -> kind; -1 for an unknown
 * name. */
int px_pipe_schedule_parse(const char *name);
const char *px_pipe_schedule_name(int kind);
const char *px_pipe_op_name(int op);

/* Builds schedule `kind` for p >= 1 stages and m >= 1 micro-batches into
 * *sched_p (caller frees with px_pipe_schedule_destroy). Errors:
 * PX_ERR_INVALID_ARGUMENT (unknown kind, p or m < 1), PX_ERR_NO_MEMORY. */
px_status_t px_pipe_schedule_create(int kind, int p, int m, px_pipe_schedule_t **sched_p);
/* The same with v model chunks per rank: v >= 2 and m a multiple of p
 * for PX_PIPE_INTERLEAVED, v == 1 for the others (else
 * PX_ERR_INVALID_ARGUMENT); px_pipe_schedule_create is v = 1. */
px_status_t px_pipe_schedule_create_v(int kind, int p, int m, int v,
                                      px_pipe_schedule_t **sched_p);
void px_pipe_schedule_destroy(px_pipe_schedule_t *sched); /* NULL no-op */

/* The one-stage list of a layout without pipelining (p = 1, v = 1): the
 * forward then the backward of each of the m micro-batches in turn (1F1B
 * on one stage: no warm-up, one slot, no messages), so the runner
 * (engine/pipeline.h) executes every layout. Errors as
 * px_pipe_schedule_create (m < 1). */
px_status_t px_pipe_schedule_create_single(int m, px_pipe_schedule_t **sched_p);

/* 1 when the schedule splits the backward (BWD = input pass, WGT =
 * weight pass: ZB1), else 0. */
int px_pipe_schedule_split(const px_pipe_schedule_t *sched);

/* The largest number of micro-batches stage s holds activations for at
 * once (FWD done, BWD not yet) in its chunk c: the activation slots the
 * runner gives that chunk. GPipe: M; 1F1B: min(p - s, M). */
int px_pipe_schedule_chunk_slots(const px_pipe_schedule_t *sched, int s, int c);
/* The sum of px_pipe_schedule_chunk_slots over stage s's chunks (the
 * chunk-sized activation buffers stage s holds). */
int px_pipe_schedule_slots(const px_pipe_schedule_t *sched, int s);

/* Virtual stage of chunk c on rank s: c * p + s (0 .. p*v - 1). */
int px_pipe_virtual_stage(const px_pipe_schedule_t *sched, int s, int c);

/* Simulates the lists with the runner's semantics (above) and checks:
 * every micro-batch is forwarded and backwarded exactly once per stage,
 * forward before backward; every send has exactly one matching receive on
 * the neighbour (and receives only where a neighbour exists); the lists
 * finish without deadlock. PX_OK, or PX_ERR_INVALID_ARGUMENT with what
 * failed (stage, action, micro-batch) in errbuf. */
px_status_t px_pipe_schedule_check(const px_pipe_schedule_t *sched, char *errbuf, size_t errlen);

/* Prints every stage's list, one line per stage ("stage 0: F0 >a0 F1 ...":
 * F forward, B backward (its input pass in split schedules), W weight
 * pass, >a / <a send / receive activation, >g / <g
 * send / receive gradient, then the micro-batch, and with v > 1 ".c" the
 * chunk: "F3.1" = forward of micro-batch 3 through chunk 1), and the
 * slots per stage. */
void px_pipe_schedule_print(const px_pipe_schedule_t *sched, FILE *out);

/* Checks an interleaved configuration (Megatron-LM's rules): v >= 2,
 * p >= 2, layers divisible by p * v, m micro-batches a multiple of p
 * (other m deadlock in the groups-of-p order, e.g. p=4 m=5; the checker
 * finds it). PX_OK or PX_ERR_INVALID_ARGUMENT naming the values
 * (errbuf). */
px_status_t px_pipe_interleaved_check(int layers, int p, int v, int m, char *errbuf,
                                      size_t errlen);

/* Layers per stage: `spec` NULL or empty: as even as possible, the first
 * layers % p stages one more (6 on 4: 2/2/1/1); else a comma list of p
 * positive counts summing to `layers` ("2,2,1,1"). out[p]. Errors:
 * PX_ERR_INVALID_ARGUMENT naming the values (errbuf). */
px_status_t px_pipe_stage_layers(int layers, int p, const char *spec, int *out, char *errbuf,
                                 size_t errlen);

/* Which units stage s of p holds (pipeline runner, engine/pipeline.h, and
 * the plan of a stage, jobplan.h), with v chunks per stage and layer counts
 * per virtual stage sl[p * v] (v = 1: per stage): held[u] = 1 for u in
 * 0..layers+1 (held[layers + 2]). */
void px_pipe_stage_units(int layers, int p, int v, const int *sl, int s, unsigned char *held);

#endif
