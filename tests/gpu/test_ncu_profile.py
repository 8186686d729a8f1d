#!/usr/bin/python3
"""test_ncu_profile.py: ncu_profile.py's reading of Nsight Compute's
per-kernel summary, on a captured sample (ncu-sample-124m-bf16-b8.txt: the
first 1,500 kernels of a GPT-2 124M bf16 step at batch 8 on an H200, the
program's and ncu's own lines kept in) and on hand-made lines:
  * 1,500 launches, 63.54 ms of kernel time; attention 31.26 ms (the three
    tc_* kernels: 15.00 + 9.30 + 6.96), conversion 10.13 ms in 657 launches,
    cross-entropy 4.56 ms in 2, every family's launches adding up to all;
  * --steps 2 halves times and launches; --step-ms gives the gap;
  * kernel names from signatures with templates and nested parentheses,
    families of library kernels (cuBLAS, cuDNN, PyTorch's flash);
  * time units ns, us, ms, usecond, msecond; no summary: exit 1 with a
    message.
usage: test_ncu_profile.py NCU_PROFILE_PY SAMPLE"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
import ncu_profile as npf  # noqa: E402

fails = 0


def check(what, ok, detail=''):
    global fails
    print('%s: %s%s' % (what, 'ok' if ok else 'FAIL', (' (%s)' % detail) if detail else ''))
    fails += not ok


def near(a, b, tol=0.006):
    return abs(a - b) <= tol


def main():
    script, sample = sys.argv[1], sys.argv[2]
    with open(sample, errors='replace') as f:
        rows = npf.parse(f)
    s = npf.summarise(rows)
    fam = s['families']
    check('launches 1500', s['launches'] == 1500, s['launches'])
    check('kernel time 63.54 ms', near(s['kernel_ms'], 63.54), '%.3f' % s['kernel_ms'])
    check('attention 31.26 ms in 32 launches',
          near(fam['attention']['ms'], 31.26) and fam['attention']['launches'] == 32,
          fam['attention'])
    check('conversion 10.13 ms in 657', near(fam['conversion']['ms'], 10.13) and
          fam['conversion']['launches'] == 657, fam['conversion'])
    check('cross-entropy 4.56 ms in 2', near(fam['cross-entropy']['ms'], 4.56) and
          fam['cross-entropy']['launches'] == 2, fam['cross-entropy'])
    check('families sum to the whole', sum(v['launches'] for v in fam.values()) == 1500 and
          near(sum(v['ms'] for v in fam.values()), s['kernel_ms'], 1e-6))
    check('tc_dq_kernel<64> 15.00 ms', near(s['kernels']['tc_dq_kernel<64>']['ms'], 15.00, 0.01))
    out = subprocess.run([sys.executable, script, sample, '--steps', '2', '--step-ms', '40',
                          '--json'], capture_output=True, text=True, timeout=60)
    j = json.loads(out.stdout) if out.returncode == 0 else {}
    check('--steps 2 --step-ms 40: per step halves, the gap',
          near(j.get('kernel_ms', 0), 31.77) and j.get('launches') == 750 and
          near(j.get('gap_ms', 0), 40 - 31.77), out.stdout[:200] + out.stderr[-300:])
    out = subprocess.run([sys.executable, script, sample, '--step-ms', '78'],
                         capture_output=True, text=True, timeout=60)
    check('text report names the gap', out.returncode == 0 and 'gap 14.46 ms' in out.stdout,
          out.stdout[-400:])
    for sig, name, famname in [
            ('void tc_dkv_kernel<64>(const __nv_bfloat16 *, float *, int)', 'tc_dkv_kernel<64>',
             'attention'),
            ('void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn>'
             '(T1::Params)', 'cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_'
             '64x64_64x4_tn>', 'GEMM'),
            ('void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_'
             'traits<(int)64, (int)128>, (bool)1>(Flash_bwd_params)',
             'pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_'
             'traits<(int)64, (int)128>, (bool)1>', 'attention'),
            ('cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1'
             '_kernel0_0()', 'cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3'
             '_64x64x64_4x1x1_kernel0_0', 'attention'),
            ('adamw_kernel(float *, float *, float *, const float *, long)', 'adamw_kernel',
             'adamw'),
            ('residual_layernorm_forward_kernel(float *)', 'residual_layernorm_forward_kernel',
             'layernorm'),
            ('void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, '
             'at::detail::Array<char *, 1>>(int, T2, T3)', 'at::native::vectorized_elementwise_'
             'kernel<4, at::native::FillFunctor<float>, at::detail::Array<char *, 1>>', 'other')]:
        got = npf.kernel_name(sig)
        check('name of %s...' % sig[:40], got == name and npf.family(got) == famname,
              '%s / %s' % (got, npf.family(got)))
    lines = []
    for unit, val in (('ns', '2000'), ('usecond', '3'), ('msecond', '0.5'), ('us', '1,500.0')):
        lines += ['  k_%s(int) (1, 1, 1)x(32, 1, 1), Context 1, Stream 7, Device 0, CC 9.0, '
                  'Invocations 2\n' % unit,
                  '    gpu__time_duration.sum %s 1 1 %s\n' % (unit, val)]
    r = npf.parse(lines)
    check('units ns, usecond, msecond, us with a thousands comma',
          [round(ms, 6) for _, _, ms in r] == [0.004, 0.006, 1.0, 3.0], r)
    with tempfile.NamedTemporaryFile('w', suffix='.txt', delete=False) as t:
        t.write('step 1 loss 10.9\n==PROF== nothing\n')
    out = subprocess.run([sys.executable, script, t.name], capture_output=True, text=True,
                         timeout=60)
    os.unlink(t.name)
    check('no summary: exit 1 with a message',
          out.returncode == 1 and 'no per-kernel summary' in out.stderr, out.stderr)
    print('test_ncu_profile: %s' % ('PASS' if not fails else '%d FAILED' % fails))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
