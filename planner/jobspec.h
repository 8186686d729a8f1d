/* jobspec.h: the wire JobSpec (proto/parallax.proto) <-> px_job_config_t
 * (jobcfg.h), both ways, so pctl, parallaxd and parallax-rank read and
 * write the spec with the same code and the same defaults.
 *
 * proto3 has no "unset": a zero on the wire means "use the default" where
 * zero is not a meaningful value:
 *   vocab 0 -> PX_DEFAULT_VOCAB; grad_accum 0 -> 1; warmup_steps 0 ->
 *   -1 (steps/20); grad_clip 0 -> 1.0, < 0 -> 0 (off); lr 0 -> the
 *   default lr; eval_batches 0 -> 4; parallel.tp/pp/cp/ep 0 -> 1; parallel.dp 0, or no
 *   `parallel` at all (old clients) -> JobSpec.dp.
 * Zero is kept as zero where it is a value: seed, weight_decay,
 * min_lr_ratio, zero, checkpoint_every, eval_every (0: validate at the end
 * only; -1: steps / 10). beta1, beta2, eps and prefetch are
 * not on the wire: the defaults apply.
 *
 * A separate library from the planner (planner_proto_lib) so the planner
 * stays free of protobuf. Pure code, any thread. */
#ifndef PX_JOBSPEC_H
#define PX_JOBSPEC_H

#include "jobcfg.h"
#include "parallax.pb-c.h"
#include "px_status.h"

/* The layout a spec asks for (the rules above), without the rest. A dp of
 * 0 stays 0 (px_layout_check rejects it, naming it). */
void px_jobspec_layout(const Parallax__V1__JobSpec *spec, px_layout_t *layout);

/* Fills *cfg from spec: px_job_config_defaults first, then every field the
 * wire carries, zeros mapped as above. The strings of *cfg are borrowed
 * from spec (valid while spec is). A spec without a model leaves layers,
 * heads, dim and seq 0 (px_job_config_check names them). Nothing is
 * checked here. */
void px_jobspec_to_config(const Parallax__V1__JobSpec *spec, px_job_config_t *cfg);

/* Room for the messages px_jobspec_from_config fills: nothing is
 * allocated, so the holder must stay where it is (spec points into it)
 * while the spec is used. */
typedef struct px_jobspec_msg {
    Parallax__V1__JobSpec spec;
    Parallax__V1__ModelSpec model;
    Parallax__V1__ParallelSpec parallel;
    Parallax__V1__MoeSpec moe; /* set (spec.moe) only when experts > 0 */
} px_jobspec_msg_t;

/* Writes cfg as a JobSpec into msg->spec (model and parallel set, JobSpec.dp
 * = layout.dp for old readers, grad_clip 0 (off) written as -1, warmup -1
 * written as 0). Strings are borrowed from cfg (NULL written as ""); name,
 * kind and the restart fields are left empty for the caller. Negative or
 * otherwise unrepresentable values (the unsigned wire fields) are written
 * as 0, i.e. the default: check cfg first. */
void px_jobspec_from_config(const px_job_config_t *cfg, px_jobspec_msg_t *msg);

#endif
