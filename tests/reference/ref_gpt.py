#!/usr/bin/python3
"""ref_gpt.py: reference test of the parallax GPT engine against PyTorch (fp32, CPU).

Runs parallax-rank for STEPS steps with --dump-dir (initial parameters, every
step's global batch, averaged pre-clip gradients, post-update parameters, loss,
grad norm and lr), builds the SAME GPT in torch from our initial parameters,
trains it with torch.optim.AdamW (weight decay on matrices only, the same
learning-rate schedule, clip_grad_norm_) on the same batches, and checks at
every step, first where the math is exact between the two sides:
  * at our parameters of the step before (the same point, no trajectory in
    between): torch's loss relative 1e-5 and every gradient tensor
    ||ours - ref|| / ||ref|| < 1e-4;
  * the replay: torch's AdamW driven by our clipped gradients from our
    parameters lands on our parameters, every tensor relative 1e-6 and every
    element within 1e-3 lr (the optimizer, clipping, the shards' update and
    the gather of the result);
then along the independent trajectory (torch's model trained on its own):
  * loss:        |ours - ref| / |ref| < 1e-5
  * grad norm:   relative 1e-4 (the reference norm summed in float64)
  * gradients:   every tensor relative 1e-4
  * parameters:  every tensor within 2e-5 relative or 10x the distance of
                 noisy twins of the reference (one-ulp noise on every GEMM
                 input) from it, whichever is larger: AdamW divides by
                 sqrt(v), so where a gradient element is near its eps a
                 last-bit difference moves the element by up to ~lr, and
                 the model carries that into later gradients; how far two
                 correct implementations drift apart depends on the kernels
                 that ran (the BLAS core), so it is measured, not fixed
  * lr:          our schedule vs the formula here, relative 1e-6

Three cases: byte-level tokens (vocab 256, 5 steps); the same with tensor
parallelism over 2 ranks (tp=2, 3 steps; launched through the standalone
bootstrap, the dumps gathered to the canonical layout by the ranks, so the
gradients compared are the tp run's gathered shards); and GPT-2's vocab 50257
(the same text spread over ids up to 50256 by make_tokens.py --vocab; 3
short steps); and context parallelism over 2 ranks (cp=2, ring attention:
each rank holds chunks i and 3-i of every sequence; its gradients, gathered
to the canonical layout, against torch's unsplit masked-softmax attention,
so a broken blockwise kernel cannot pass by agreeing with our own unsplit
path). The model pads wte to Vp = 50304 rows (a multiple of 64, as
llm.c); the dumps carry all Vp rows. The reference computes the logits over
all Vp rows and takes the cross-entropy over the first V columns only, so
the padded rows get exactly zero gradient there too; every gradient tensor,
wte with its padded rows included, is compared, and the padded rows must be
exactly 0 in our gradients and parameters (initialised 0, never updated).

bf16 (*-bf16 cases, issue 12: --precision bf16, "bf16 GEMM and attention operands, fp32
elsewhere"): every linear layer of the reference (qkv, attention and MLP
projections, the tied LM head, MoE router and experts) is a BF16Linear: its
inputs rounded with torch's .to(torch.bfloat16).float() - x and W in
forward, dy and W for dx, dy and x for dW - multiplied in float64 and
rounded once to float32 (exact bf16 products, as a bf16 tensor core; the
engine's CPU op sums in double too), bias and its gradient fp32. Attention
is a BF16Attention: its batched products take bf16 operands as the
engine's attention_bf16_* ops do (kernels/px_attention_bf16_cpu.c) - q, k;
the unnormalised probabilities E = 2^(z - m) (z = S log2 e, m = the row's
floor(max z)) and v, normalised by the fp32 sum of E; in backward E again
(m from lse, the row's normaliser c = 2^m / exp(lse) outside the rounding)
and dout, dout and v for dP, and E (dP - delta) scale for dq and dk, delta
= rowsum(dout * out) - each product in float64 and rounded once to
float32. LayerNorm, GELU, softmax and the cross-entropy stay fp32, as
ours. The tolerances are the fp32 ones where they hold and looser
where bf16 rounding amplifies last-bit differences (TOL_BF16 below).

The mixture of experts (moe-* cases): the reference routes, drops and
combines as engine/moe.h says (moe_mlp below), adds Switch's
load-balancing loss, and every router and expert gradient and parameter
is compared as the dense ones are.

With --planted (instead of case names) each of PLANTS runs with an error
planted in one side and must fail the check that catches it.

usage: /usr/bin/python3 ref_gpt.py RANK_BIN MAKE_TOKENS_PY [WORKDIR [CASE ... | --planted]]
Exit 0 pass, 1 fail, 77 skip (no torch)."""
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from pxport import free_port  # noqa: E402

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    print('skip: %s (run with /usr/bin/python3)' % e)
    sys.exit(77)

LAYERS, HEADS, DIM = 2, 4, 64
# (name, vocab, seq, batch, steps, tp, cp, moe flags)
CASES = [('vocab256', 256, 32, 4, 5, 1, 1, None), ('vocab50257', 50257, 16, 4, 3, 1, 1, None),
         ('vocab256-tp2', 256, 32, 4, 3, 2, 1, None), ('vocab256-cp2', 256, 32, 4, 3, 1, 2, None)]
# The mixture of experts (engine/moe.h; issue 11): layer 1 of 2 is MoE
# (--moe-every 2), 4 experts, top-2 and top-1; dropless, and capacity
# factor 1.0 (choices dropped), the latter also over ep 2 (world 2, dp 2:
# one ep group holds the whole batch, so it is the same model).
MOE = ['--experts', '4', '--moe-every', '2', '--aux-loss-coef', '0.05']
CASES += [('moe-dropless-top2', 256, 32, 4, 4, 1, 1, MOE + ['--top-k', '2', '--dropless']),
          ('moe-cap1.0-top2', 256, 32, 4, 4, 1, 1, MOE + ['--top-k', '2',
                                                        '--capacity-factor', '1.0']),
          ('moe-cap1.0-top1-ep2', 256, 32, 4, 4, 1, 1, MOE + ['--top-k', '1',
                                                            '--capacity-factor', '1.0',
                                                            '--ep', '2']),
          # with the other strategies (test_moe_combo.py): cp 2 x ep 2 (world
          # 2: the ep group is the two cp ranks, capacity filled in the
          # single-rank token order) and tp 2 (experts replicated over tp)
          ('moe-cap1.0-top2-cp2ep2', 256, 32, 4, 4, 1, 1,
           MOE + ['--top-k', '2', '--capacity-factor', '1.0', '--ep', '2', '--cp', '2']),
          ('moe-cap1.0-top2-tp2', 256, 32, 4, 4, 2, 1,
           MOE + ['--top-k', '2', '--capacity-factor', '1.0'])]
# bf16 (issue 12): one rank, tp 2 (its row-parallel GEMMs sum over split
# columns, then all-reduce) and cp 2 (ring attention's bf16 blocks against
# the reference's unsplit bf16 attention)
CASES += [('vocab256-bf16', 256, 32, 4, 5, 1, 1, None),
          ('vocab256-tp2-bf16', 256, 32, 4, 3, 2, 1, None),
          ('vocab256-cp2-bf16', 256, 32, 4, 3, 1, 2, None),
          ('moe-dropless-top2-bf16', 256, 32, 4, 4, 1, 1, MOE + ['--top-k', '2', '--dropless'])]
LR, WARMUP, MIN_LR_RATIO, WD, CLIP, SEED = 3e-3, 2, 0.1, 0.1, 1.0, 4242
BETA1, BETA2, EPS = 0.9, 0.95, 1e-8

VAL_BATCHES = 2
TOL_LOSS, TOL_GNORM, TOL_GRAD, TOL_PARAM, TOL_LR = 1e-5, 1e-4, 1e-4, 2e-5, 1e-6
TOL_FP32 = {'loss': TOL_LOSS, 'gnorm': TOL_GNORM, 'grad': TOL_GRAD, 'param': TOL_PARAM}
# bf16: rounding a GEMM input to bf16 turns the last-bit differences of the
# fp32 ops around it (torch's LayerNorm, GELU, softmax against ours) into
# 2^-8 jumps wherever a value straddles a rounding boundary, and AdamW's
# first steps move an element by ~lr whatever its gradient's size, so a
# flipped tiny gradient moves its parameter by up to lr: measured worst
# tensors 1e-5 (loss), 4e-5 (norm), 3e-3 (gradients), 1.3e-3 (parameters)
# over these cases with bf16 attention on both sides (the tolerances below
# are 3-5x those; with fp32 attention they were 1e-5, 2e-4, 1e-2, 4e-3). The floor check says what those figures mean: at step
# 1 (the same parameters on both sides) our worst gradient tensor is no
# further from the reference than the reference lands from itself when
# one-ulp noise is put on every GEMM input before its rounding (bf16_floor),
# times TOL_BF16_FLOOR.
TOL_BF16 = {'loss': 5e-5, 'gnorm': 2e-4, 'grad': 1e-2, 'param': 5e-3}
TOL_BF16_FLOOR = 3.0
# The replay (torch's AdamW on our gradients from our parameters) differs
# from ours by the rounding of the update's fp32 arithmetic alone.
# Measured on an Intel Sapphire Rapids (OpenBLAS Cooperlake) and AMD Zen 5:
# worst tensor 1.04e-7, worst element 7.2e-5 lr (an element whose m cancels).
TOL_REPLAY, TOL_REPLAY_LR = 1e-6, 1e-3
TRAJ_FACTOR, TWINS = 10.0, 2
# A planted error (--planted): one side made wrong on purpose, to show the
# checks catch it: 'bias-grad' (the reference's gradient of layer 0's fc
# bias 1% off), 'skip-expert' (the reference's last expert adds nothing),
# 'optimizer' (the replay's AdamW without weight decay, as an optimizer that
# skipped it would update); each with the case it runs and the check that
# must fail.
PLANTS = [('bias-grad', 'vocab256', 'grads at our params'),
          ('skip-expert', 'moe-dropless-top2', 'loss at our params'),
          ('optimizer', 'vocab256-tp2', 'params = AdamW(our grads)')]
PLANT = None


class GradScale(torch.autograd.Function):
    """x in forward, its gradient times s in backward (the bias-grad plant)"""

    @staticmethod
    def forward(ctx, x, s):
        ctx.s = s
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * ctx.s, None


BF16 = False  # set per case: the reference's linear layers are BF16Linear


NOISE = None  # a torch.Generator while the reference runs with last-bit noise


def ulp_noise(t):
    """with NOISE, t moved by one fp32 unit in the last place up or down at
    random (the size of the differences between two fp32 implementations of
    an op); t itself otherwise"""
    if NOISE is None:
        return t
    sign = torch.randint(0, 2, t.shape, generator=NOISE).to(t.dtype) * 2 - 1
    return t * (1 + sign * 2.0 ** -23)


def r16(t):
    """t rounded to bf16 (torch: round to nearest even), back in fp32; with
    NOISE, t is first moved by one ulp (ulp_noise)"""
    return ulp_noise(t).to(torch.bfloat16).float()


class NoisyLinear(torch.autograd.Function):
    """y = x W^T (+ b) in fp32 with one-ulp noise on every GEMM input in
    both directions (ulp_noise): a correct fp32 linear layer whose inputs
    differ from ours in the last bit, as two GEMM libraries' results do."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.has_b = b is not None
        y = ulp_noise(x) @ ulp_noise(w).T
        return y + b if b is not None else y

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dn = ulp_noise(dy)
        dx = dn @ ulp_noise(w)
        dw = dn.reshape(-1, dn.shape[-1]).T @ ulp_noise(x).reshape(-1, x.shape[-1])
        db = dy.reshape(-1, dy.shape[-1]).sum(0) if ctx.has_b else None
        return dx, dw, db


class BF16Linear(torch.autograd.Function):
    """y = x W^T (+ b) with bf16-rounded GEMM inputs in both directions,
    products summed in float64 and rounded once to fp32 (see the file
    comment); x (..., C), W (OC, C), b (OC) or None."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.has_b = b is not None
        y = (r16(x).double() @ r16(w).double().T).float()
        return y + b if b is not None else y

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        d16 = r16(dy).double()
        dx = (d16 @ r16(w).double()).float()
        dw = (d16.reshape(-1, d16.shape[-1]).T @ r16(x).double().reshape(-1, x.shape[-1]))
        db = dy.reshape(-1, dy.shape[-1]).sum(0) if ctx.has_b else None
        return dx, dw.float(), db


class BF16Attention(torch.autograd.Function):
    """Causal softmax(q k^T scale) v with bf16 product operands (see the file
    comment); q, k, v (B, NH, T, hs) float32, returns (B, NH, T, hs)."""

    @staticmethod
    def forward(ctx, q, k, v):
        T, hs = q.shape[-2], q.shape[-1]
        scale = float(np.float32(1.0) / np.sqrt(np.float32(hs)))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        S = ((r16(q).double() @ r16(k).double().transpose(-2, -1)) * scale).float()
        z = S * LOG2E
        m = z.masked_fill(~mask, float('-inf')).amax(-1, keepdim=True).floor()
        e = exp2_rel(z, m).masked_fill(~mask, 0.0)
        ls = e.double().sum(-1, keepdim=True)
        y = ((r16(e).double() @ r16(v).double()) / ls).float()
        lse = (torch.log(ls) + m.double() * math.log(2.0)).float()
        ctx.save_for_backward(q, k, v, z, y, lse)
        ctx.scale = scale
        return y

    @staticmethod
    def backward(ctx, dy):
        q, k, v, z, y, lse = ctx.saved_tensors
        T = q.shape[-2]
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        d16 = r16(dy).double()
        dP = (d16 @ r16(v).double().transpose(-2, -1)).float()
        delta = (dy * y).sum(-1, keepdim=True)
        mb = (lse * LOG2E).floor()
        c = torch.exp(mb.double() * math.log(2.0) - lse.double())
        e = exp2_rel(z, mb).masked_fill(~mask, 0.0)
        dv = r16(e).double().transpose(-2, -1) @ (c * d16)
        ds = r16(e * (dP - delta) * ctx.scale).masked_fill(~mask, 0.0).double() * c
        dq = ds @ r16(k).double()
        dk = ds.transpose(-2, -1) @ r16(q).double()
        return dq.float(), dk.float(), dv.float()


LOG2E = float(np.float32(math.log2(math.e)))


def exp2_rel(z, m):
    """2^(z - m) as the engine computes it: exp2(z - floor z) * 2^(floor z -
    m), an exact power-of-two scaling (float32)"""
    n = z.floor()
    return torch.exp2(z - n) * torch.exp2((n - m).clamp(min=-150.0))


def bf16_floor(P, inputs, targets, vocab, moe):
    """The worst tensor's ||g_noisy - g_bf16|| / ||g_bf16|| at P: the
    reference's bf16 gradients against themselves with one-ulp noise on
    every GEMM input before its rounding (NOISE): how far two correct bf16
    implementations whose fp32 ops differ in the last bit land apart
    (g_bf16 = P[k].grad, already computed)."""
    global NOISE
    Q = {k: v.detach().clone().requires_grad_(True) for k, v in P.items()}
    NOISE = torch.Generator().manual_seed(SEED)
    try:
        gpt_loss(Q, inputs, targets, vocab, moe).backward()
    finally:
        NOISE = None
    return max(rel(Q[k].grad if Q[k].grad is not None else torch.zeros_like(Q[k]), P[k].grad)
               for k in P)


def lin(x, w, b=None):
    """the linear layer x W^T + b: fp32, or bf16 GEMMs in the bf16 cases"""
    if BF16:
        return BF16Linear.apply(x, w, b)
    if NOISE is not None:
        return NoisyLinear.apply(x, w, b)
    y = x @ w.T
    return y + b if b is not None else y


def lr_at(step, steps):  # 0-based step, as px_train_lr
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    ratio = (step - WARMUP) / (steps - WARMUP)
    min_lr = LR * MIN_LR_RATIO
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - min_lr)


def moe_mlp(P, l, h, moe):
    """The MoE MLP of layer l (moe.h) on h (B,T,C): softmax router, top-k
    (gates renormalised with top-2, the probability with top-1), experts'
    capacity ceil(N K / E F) filled in the order (choice, token), dropped
    choices adding 0; returns (out, Switch's aux loss)."""
    B, T, C = h.shape
    x = h.reshape(-1, C)
    N, E, K = x.shape[0], moe['experts'], moe['top_k']
    probs = lin(x, P['moe_router'][l]).softmax(-1)
    top, idx = probs.topk(K, dim=-1)
    w = top / top.sum(-1, keepdim=True) if K == 2 else top
    cap = N * K if moe['dropless'] else math.ceil(N * K / E * moe['capacity_factor'])
    kept = torch.zeros(N, K, dtype=torch.bool)
    offset = torch.zeros(E, dtype=torch.long)
    for j in range(K):
        oh = F.one_hot(idx[:, j], E)
        pos = ((oh.cumsum(0) - 1 + offset) * oh).sum(1)
        kept[:, j] = pos < cap
        offset += oh.sum(0)
    out = torch.zeros_like(x)
    for e in range(E - 1 if PLANT == 'skip-expert' else E):
        for j in range(K):
            sel = ((idx[:, j] == e) & kept[:, j]).nonzero().flatten()
            if sel.numel() == 0:
                continue
            y = F.gelu(lin(x[sel], P['moe_fcw'][l][e], P['moe_fcb'][l][e]), approximate='tanh')
            y = lin(y, P['moe_fcprojw'][l][e], P['moe_fcprojb'][l][e])
            out = out.index_add(0, sel, w[sel, j:j + 1] * y)
    f = F.one_hot(idx, E).sum((0, 1)).double() / (N * K)
    aux = moe['aux_loss_coef'] * E * (f.float() * probs.mean(0)).sum()
    return out.view(B, T, C), aux


def gpt_loss(P, inputs, targets, vocab, moe=None, with_aux=True):
    """Pre-LN GPT-2 forward, P: dict of our stacked tensors; wte has the
    padded rows, whose logits are left out of the cross-entropy. moe: the
    mixture of experts' settings (MoE layers' MLPs from moe_mlp, P's moe_*
    tensors stacked over the MoE layers), plus each MoE layer's aux loss
    unless with_aux is False (the validation loss: the LM loss alone)."""
    logits, aux = gpt_logits(P, inputs, vocab, moe)
    ce = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
    return ce + aux if with_aux else ce


def gpt_logits(P, inputs, vocab, moe=None):
    """The forward of gpt_loss up to the logits over the first `vocab`
    columns (B,T,vocab), and the MoE layers' summed aux loss (0.0 dense).
    The dims are the module's LAYERS, HEADS, DIM (a caller with another
    model sets them first)."""
    B, T = inputs.shape
    C, NH, L = DIM, HEADS, LAYERS
    hs = C // NH
    x = P['wte'][inputs] + P['wpe'][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    aux = 0.0
    for l in range(L):
        h = F.layer_norm(x, (C,), P['ln1w'][l], P['ln1b'][l], 1e-5)
        qkv = lin(h, P['qkvw'][l], P['qkvb'][l])
        q, k, v = qkv.split(C, dim=2)
        q, k, v = [t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v)]
        if BF16:
            y = BF16Attention.apply(q, k, v)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
            att = att.masked_fill(~mask, float('-inf')).softmax(-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + lin(y, P['attprojw'][l], P['attprojb'][l])
        h = F.layer_norm(x, (C,), P['ln2w'][l], P['ln2b'][l], 1e-5)
        if moe and l in moe['layers']:
            y, a = moe_mlp(P, moe['layers'].index(l), h, moe)
            x = x + y
            aux = aux + a
            continue
        fcb = GradScale.apply(P['fcb'][l], 1.01) if PLANT == 'bias-grad' and l == 0 \
            else P['fcb'][l]
        h = F.gelu(lin(h, P['fcw'][l], fcb), approximate='tanh')
        x = x + lin(h, P['fcprojw'][l], P['fcprojb'][l])
    x = F.layer_norm(x, (C,), P['lnfw'], P['lnfb'], 1e-5)
    return lin(x, P['wte'])[..., :vocab], aux


def rel(a, b):
    return float(torch.linalg.vector_norm(a - b) / max(float(torch.linalg.vector_norm(b)), 1e-30))


def launch(cmd, tp, cp=1, ep_world=0):
    """Runs cmd on tp x cp ranks (the standalone bootstrap when more than 1);
    ep_world: that many data-parallel ranks instead (cmd carries --ep)."""
    world = ep_world or tp * cp
    flag = [] if ep_world else ['--tp', str(tp), '--cp', str(cp)]
    if world == 1:
        subprocess.run(cmd, check=True, env=dict(os.environ, PX_WORLD_SIZE='1'),
                       stdout=subprocess.DEVNULL)
        return
    port = free_port()
    procs = [subprocess.Popen(cmd + flag,
                              stdout=subprocess.DEVNULL,
                              env=dict(os.environ, PX_RANK=str(r), PX_WORLD_SIZE=str(world),
                                       PX_MASTER_ADDR='127.0.0.1', PX_MASTER_PORT=str(port)))
             for r in range(world)]
    rcs = [p.wait(timeout=240) for p in procs]
    if any(rcs):
        raise RuntimeError('tp=%d cp=%d ranks exited %s' % (tp, cp, rcs))


def run_case(rank_bin, make_tokens, work, lic, name, vocab, seq, batch, steps, tp, cp, check,
             moe_flags=None):
    """Trains `steps` steps with parallax-rank and checks them against torch."""
    work = os.path.join(work, name)
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, 'tokens.bin')
    spread = [] if vocab == 256 else ['--vocab', str(vocab)]
    subprocess.run([sys.executable, make_tokens, data] + lic + spread, check=True,
                   stdout=subprocess.DEVNULL)
    # issue 14: a validation file (the same texts in another order); the
    # validation loss after every 2nd step and the last is checked against
    # torch's loss of our dumped parameters on the dumped validation batches
    val = os.path.join(work, 'val.bin')
    subprocess.run([sys.executable, make_tokens, val] + lic[::-1] + spread, check=True,
                   stdout=subprocess.DEVNULL)
    dump = os.path.join(work, 'dump')
    # (every case: with cp each rank evaluates its chunks; with experts
    # the validation loss is the LM loss without the load-balancing aux)
    with_val = True
    val_flags = ['--val-data', val, '--eval-every', '2', '--eval-batches',
                 str(VAL_BATCHES)] if with_val else []
    cmd = [rank_bin] + val_flags + ['--layers', str(LAYERS), '--heads', str(HEADS),
                                    '--dim', str(DIM),
           '--seq', str(seq), '--batch', str(batch), '--steps', str(steps), '--lr', repr(LR),
           '--warmup', str(WARMUP), '--min-lr-ratio', repr(MIN_LR_RATIO),
           '--weight-decay', repr(WD), '--grad-clip', repr(CLIP), '--seed', str(SEED),
           '--vocab', str(vocab), '--data', data, '--dump-dir', dump, '--dump-steps', str(steps)]
    global BF16, NOISE
    BF16 = name.endswith('-bf16')
    if BF16:
        cmd += ['--precision', 'bf16']
    tol = TOL_BF16 if BF16 else TOL_FP32
    ep = int(moe_flags[moe_flags.index('--ep') + 1]) if moe_flags and '--ep' in moe_flags else 0
    launch(cmd + (moe_flags or []), tp, cp, ep_world=ep)

    layout = json.load(open(os.path.join(dump, 'layout.json')))
    n = layout['num_params']
    vp = layout['padded_vocab']
    print('-- %s: vocab %d, wte rows %d, seq %d, batch %d, %d steps, tp %d, cp %d' % (
        name, vocab, vp, seq, batch, steps, tp, cp))
    check('%s padded vocab %d is vocab rounded up to 64' % (name, vp),
          0.0 if vp == (vocab + 63) // 64 * 64 else 1.0, 0.5)

    def load_f32(name):
        a = np.fromfile(os.path.join(dump, name), dtype='<f4')
        assert a.size == n, '%s: %d floats, expected %d' % (name, a.size, n)
        return torch.from_numpy(a.copy())

    def split(flat):
        return {t['name']: flat[t['offset']:t['offset'] + t['size']].view(*t['shape'])
                for t in layout['tensors']}

    init = split(load_f32('params_init.bin'))
    moe = None
    if moe_flags:  # the MoE tensors, stacked over the MoE layers as ours
        mlay = json.load(open(os.path.join(dump, 'moe_layout.json')))
        mnames = ['moe_router', 'moe_fcw', 'moe_fcb', 'moe_fcprojw', 'moe_fcprojb']
        layers = sorted(set(t['layer'] for t in mlay['tensors']))

        def flag(f, d):
            return moe_flags[moe_flags.index(f) + 1] if f in moe_flags else d
        moe = {'experts': mlay['experts'], 'top_k': mlay['top_k'], 'layers': layers,
               'dropless': '--dropless' in moe_flags,
               'capacity_factor': float(flag('--capacity-factor', '1.25')),
               'aux_loss_coef': float(flag('--aux-loss-coef', '0.01'))}
        nm = sum(math.prod(t['shape']) for t in mlay['tensors'])

        def msplit(fname):
            a = np.fromfile(os.path.join(dump, fname), dtype='<f4')
            assert a.size == nm, '%s: %d floats, expected %d' % (fname, a.size, nm)
            a = torch.from_numpy(a.copy())
            return {k: torch.stack([a[t['offset']:t['offset'] + math.prod(t['shape'])]
                                    .view(*t['shape']) for t in mlay['tensors']
                                    if t['name'] == k]) for k in mnames}
        init.update(msplit('moe_params_init.bin'))
    P = {k: torch.nn.Parameter(v.clone()) for k, v in init.items()}
    decay_names = [t['name'] for t in layout['tensors'] if t['decay']]
    assert decay_names == ['wte', 'wpe', 'qkvw', 'attprojw', 'fcw', 'fcprojw']
    if moe:  # matrices decay, biases do not (experts.c px_experts_update)
        decay_names += ['moe_router', 'moe_fcw', 'moe_fcprojw']

    def adamw(T, wd=WD):
        """torch's AdamW over the tensors T with our parameter groups"""
        return torch.optim.AdamW([{'params': [T[k] for k in T if k in decay_names],
                                   'weight_decay': wd},
                                  {'params': [T[k] for k in T if k not in decay_names],
                                   'weight_decay': 0.0}],
                                 lr=LR, betas=(BETA1, BETA2), eps=EPS)
    # The independent reference: torch's model trained by torch's AdamW on
    # torch's gradients from our initial parameters.
    opt = adamw(P)
    # The replay: torch's AdamW driven by OUR clipped gradients from OUR
    # parameters of the step before, so that its result differs from our
    # parameters by the optimizer's arithmetic alone.
    Q = {k: torch.nn.Parameter(v.clone()) for k, v in init.items()}
    opt_q = adamw(Q, 0.0 if PLANT == 'optimizer' else WD)
    ours_prev = {k: v.clone() for k, v in init.items()}
    # The noisy twins of the reference (step 4 below).
    twins = []
    for _ in range(TWINS):
        R = {k: torch.nn.Parameter(v.clone()) for k, v in init.items()}
        twins.append((R, adamw(R)))
    # initialisation statistics (std 0.02 matrices, 0.02/sqrt(2L) projections, LN 1/0)
    check('init std wte vs 0.02', abs(float(init['wte'][:vocab].std()) - 0.02) / 0.02, 0.02)
    # a MoE layer holds no dense MLP (planner/model.h): its slices are 0,
    # the statistics are the dense layers'
    dense = [l for l in range(LAYERS) if not moe or l not in moe['layers']]
    check('init std fcprojw vs 0.02/sqrt(2L)',
          abs(float(init['fcprojw'][dense].std()) - 0.02 / math.sqrt(2 * LAYERS)) /
          (0.02 / math.sqrt(2 * LAYERS)), 0.05)
    if moe:
        check('MoE layers: dense MLP slices 0', float(sum(
            init[k][moe['layers']].abs().max() for k in ('fcw', 'fcb', 'fcprojw', 'fcprojb'))),
            1e-30)
    check('init ln1w == 1, qkvb == 0',
          float((init['ln1w'] - 1).abs().max() + init['qkvb'].abs().max()), 1e-30)
    if vp > vocab:
        check('init padded wte rows == 0', float(init['wte'][vocab:].abs().max()), 1e-30)

    for s in range(1, steps + 1):
        b = np.fromfile(os.path.join(dump, 'batch_%d.bin' % s), dtype='<i4')
        assert b.size == 2 * batch * seq
        inputs = torch.from_numpy(b[:batch * seq].reshape(batch, seq).astype(np.int64))
        targets = torch.from_numpy(b[batch * seq:].reshape(batch, seq).astype(np.int64))
        assert torch.equal(inputs[:, 1:], targets[:, :-1]), 'targets are inputs shifted by one'
        our_loss, our_gnorm, our_lr = [float(x) for x in
                                       open(os.path.join(dump, 'loss_%d.txt' % s)).read().split()]
        our_g = split(load_f32('grads_%d.bin' % s))
        if moe:
            our_g.update(msplit('moe_grads_%d.bin' % s))

        # 1. The same point: torch's loss and gradients at OUR parameters of
        # the step before, on the same batch: the forward and backward alone,
        # no trajectory between the two sides.
        Z = {k: v.clone().requires_grad_(True) for k, v in ours_prev.items()}
        zloss = gpt_loss(Z, inputs, targets, vocab, moe)
        zloss.backward()
        zg = {k: Z[k].grad if Z[k].grad is not None else torch.zeros_like(Z[k]) for k in Z}
        check('step %d loss at our params (ours %.6f)' % (s, our_loss),
              abs(our_loss - zloss.item()) / abs(zloss.item()), tol['loss'])
        worst = max((rel(our_g[k], zg[k]), k) for k in Z)
        check('step %d grads at our params, worst %s' % (s, worst[1]), worst[0], tol['grad'])
        if BF16 and s == 1:  # the same parameters: against the noise floor
            floor = bf16_floor(Z, inputs, targets, vocab, moe)
            check('step 1 grads vs last-bit noise floor %.1e' % floor, worst[0] / floor,
                  TOL_BF16_FLOOR)
        if vp > vocab:
            check('step %d padded wte rows: grad == 0' % s,
                  float(our_g['wte'][vocab:].abs().max() + zg['wte'][vocab:].abs().max()),
                  1e-30)

        # 2. The independent reference one step further on its own trajectory.
        opt.zero_grad()
        loss = gpt_loss(P, inputs, targets, vocab, moe)
        loss.backward()
        for k in P:  # the dense MLP of a MoE layer is unused: gradient 0, as ours
            if P[k].grad is None:
                P[k].grad = torch.zeros_like(P[k])
        check('step %d loss (ours %.6f)' % (s, our_loss), abs(our_loss - loss.item()) /
              abs(loss.item()), tol['loss'])
        worst = max((rel(our_g[k], P[k].grad), k) for k in P)
        check('step %d grads, worst tensor %s' % (s, worst[1]), worst[0], tol['grad'])
        # clip_grad_norm_ by hand, with the norm summed in float64: torch's
        # fp32 norm of the 3.2M wte gradients of the vocab-50257 case is
        # itself 1e-4 off the exact value (ours sums in double)
        gnorm = math.sqrt(sum(float(P[k].grad.double().pow(2).sum()) for k in P))
        coef = CLIP / (gnorm + 1e-6)
        if coef < 1.0:
            for k in P:
                P[k].grad.mul_(coef)
        check('step %d grad norm' % s, abs(our_gnorm - gnorm) / gnorm, tol['gnorm'])
        lr = lr_at(s - 1, steps)
        check('step %d lr %.6g' % (s, lr), abs(our_lr - lr) / lr, TOL_LR)
        for g in opt.param_groups + opt_q.param_groups:
            g['lr'] = lr
        opt.step()
        our_p = split(load_f32('params_%d.bin' % s))
        if moe:
            our_p.update(msplit('moe_params_%d.bin' % s))

        # 3. The replay: torch's AdamW on our clipped gradients from our
        # parameters must land on our parameters up to fp32 rounding of the
        # update: the optimizer, the clipping, the shards' update and the
        # gather of the result, exactly where the math is exact.
        qcoef = min(CLIP / (our_gnorm + 1e-6), 1.0)
        with torch.no_grad():
            for k in Q:
                Q[k].copy_(ours_prev[k])
                Q[k].grad = our_g[k] * qcoef
        opt_q.step()
        worst = max((rel(our_p[k], Q[k].data), k) for k in Q)
        check('step %d params = AdamW(our grads), worst %s' % (s, worst[1]), worst[0],
              TOL_REPLAY)
        dmax = max((float((our_p[k] - Q[k].data).abs().max()) / lr, k) for k in Q)
        check('step %d  max element |diff|/lr, %s' % (s, dmax[1]), dmax[0], TOL_REPLAY_LR)

        vpath = os.path.join(dump, 'val_loss_%d.txt' % s)
        check('step %d validation loss reported' % s,
              0.0 if os.path.exists(vpath) == (with_val and (s % 2 == 0 or s == steps))
              else 1.0, 0.5)
        if os.path.exists(vpath):
            our_val = float(open(vpath).read())
            with torch.no_grad():
                ref_val = 0.0
                for k in range(VAL_BATCHES):
                    vb = np.fromfile(os.path.join(dump, 'val_batch_%d.bin' % k), dtype='<i4')
                    vi = torch.from_numpy(vb[:batch * seq].reshape(batch, seq).astype(np.int64))
                    vt = torch.from_numpy(vb[batch * seq:].reshape(batch, seq).astype(np.int64))
                    ref_val += gpt_loss(our_p, vi, vt, vocab, moe,
                                        with_aux=False).item() / VAL_BATCHES
            check('step %d validation loss (ours %.6f, torch %.6f)' % (s, our_val, ref_val),
                  abs(our_val - ref_val) / ref_val, TOL_LOSS)
        if vp > vocab:
            check('step %d padded wte rows stay 0' % s,
                  float(our_p['wte'][vocab:].abs().max()), 1e-30)

        # 4. The two trajectories' parameters. Where a gradient element is
        # near AdamW's eps, m / (sqrt(v) + eps) turns a last-bit difference
        # of the gradient into an update difference of up to ~lr, and the
        # model then carries that difference into every later gradient: how
        # far two correct implementations' trajectories drift apart depends
        # on which kernels ran (the BLAS core), not on a fixed figure. The
        # noisy twin (the reference again, with one-ulp noise on every GEMM
        # input) measures that drift for this case on this machine; each
        # tensor must lie within TOL_PARAM or TRAJ_FACTOR times the twin's
        # distance, whichever is larger. The k slice of qkvb (an exactly
        # zero true gradient: a bias on k adds q.b to every score of a row,
        # which softmax ignores) is pure rounding noise on both sides: it is
        # checked by its size only.
        for t, (R, opt_r) in enumerate(twins):
            NOISE = torch.Generator().manual_seed(SEED + 1000 * t + s)
            try:
                opt_r.zero_grad()
                gpt_loss(R, inputs, targets, vocab, moe).backward()
            finally:
                NOISE = None
            for k in R:
                if R[k].grad is None:
                    R[k].grad = torch.zeros_like(R[k])
            rnorm = math.sqrt(sum(float(R[k].grad.double().pow(2).sum()) for k in R))
            if CLIP / (rnorm + 1e-6) < 1.0:
                for k in R:
                    R[k].grad.mul_(CLIP / (rnorm + 1e-6))
            for g in opt_r.param_groups:
                g['lr'] = lr
            opt_r.step()
        kb_ours, kb_ref = our_p['qkvb'][:, DIM:2 * DIM], P['qkvb'].data[:, DIM:2 * DIM]
        lr_sum = sum(lr_at(i, steps) for i in range(s))
        check('step %d k-bias stays noise (max|.|/sum lr)' % s,
              float(max(kb_ours.abs().max(), kb_ref.abs().max())) / lr_sum, 1.0 + 1e-3)

        def qv(t, k):  # the q and v biases of qkvb; other tensors whole
            return torch.cat([t[:, :DIM], t[:, 2 * DIM:]], 1) if k == 'qkvb' else t

        def drift(A, k):  # how far A's tensor k lies from the reference's
            return rel(qv(A[k], k), qv(P[k].data, k))
        twin = {k: max(drift({k: R[k].data}, k) for R, _ in twins) for k in P}
        worst = max((drift(our_p, k) / max(tol['param'], TRAJ_FACTOR * twin[k]), k) for k in P)
        k = worst[1]
        check('step %d params, worst %s %.1e (twins %.1e)' % (s, k, drift(our_p, k), twin[k]),
              worst[0], 1.0)
        ours_prev = our_p


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    rank_bin, make_tokens = sys.argv[1], sys.argv[2]
    work = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp(prefix='px_ref_')
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    lic = sorted(os.path.join('/usr/share/common-licenses', f)
                 for f in os.listdir('/usr/share/common-licenses'))
    checks = []

    def check(what, value, tol):
        ok = value < tol
        checks.append((what, value, tol, ok))
        print('%-44s %.3e  (tol %.0e) %s' % (what, value, tol, 'ok' if ok else 'FAIL'))

    only = sys.argv[4:]  # case names (all by default), or --planted
    if only == ['--planted']:
        return planted(rank_bin, make_tokens, work, lic)
    for name, vocab, seq, batch, steps, tp, cp, moe_flags in CASES:
        if only and name not in only:
            continue
        run_case(rank_bin, make_tokens, work, lic, name, vocab, seq, batch, steps, tp, cp, check,
                 moe_flags)
    failed = [c for c in checks if not c[3]]
    if failed:  # how many and which, so the end of a long log says what broke
        print('FAIL: %d of %d checks failed (workdir %s):' % (len(failed), len(checks), work))
        for what, value, tol, _ in failed:
            print('  %-42s %.3e > tol %.0e' % (what, value, tol))
    else:
        print('PASS (%d checks, workdir %s)' % (len(checks), work))
    return 1 if failed else 0


def planted(rank_bin, make_tokens, work, lic):
    """Runs each of PLANTS' cases with its error planted: passes when every
    planted error fails the check it must fail."""
    global PLANT
    caught = []
    for plant, case, must_fail in PLANTS:
        failed = []

        def check(what, value, tol):
            if not value < tol:
                failed.append(what)
        PLANT = plant
        try:
            c = next(c for c in CASES if c[0] == case)
            run_case(rank_bin, make_tokens, os.path.join(work, 'planted-' + plant), lic, *c[:7],
                     check, c[7])
        finally:
            PLANT = None
        hit = [f for f in failed if must_fail in f]
        print('planted %-12s in %-18s %d checks failed, %d of them "%s": %s' % (
            plant, case, len(failed), len(hit), must_fail, 'caught' if hit else 'MISSED'))
        for f in failed[:6]:
            print('    ' + f)
        caught.append(bool(hit))
    ok = all(caught)
    print('PASS' if ok else 'FAIL', '(%d planted errors, %d caught)' % (len(caught), sum(caught)))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
