#!/usr/bin/env python3
"""test_rogue.py: a rank plane that admits only its job (integration;
standalone bootstrap, two ranks with PX_JOB_SECRET).

A rogue process (this script) connects to rank 0's bootstrap port before
rank 1 starts and tries, on separate connections:
  junk      bytes that are not a hello;
  silent    a connection that sends nothing (held until refused);
  nosecret  a well-formed hello for rank 1 proven without the secret;
  wrong     the same proven with a wrong secret;
then rank 1 starts with the right secret. While the job trains, the rogue
connects to every TCP port the two rank processes listen on (their UCX
endpoints) and sends junk. Required: both ranks exit 0 having run every
step, and rank 0's stderr logs one refusal per rogue connection (3 or more:
the silent one is refused too; "junk" may be refused as "no valid hello").
Without the secret check a forged hello took rank 1's place and the real
rank 1 was then a duplicate: the job failed.

Last, a rank 1 started with the wrong secret is refused and fails (non-zero,
within the connect deadline) instead of joining.
usage: test_rogue.py RANK_BIN MAKE_TOKENS_PY WORKDIR"""
import hashlib
import hmac
import os
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import free_port, license_tokens  # noqa: E402

SECRET = 'correct horse battery staple'
HELLO_MAGIC = 0x50584253
CHALLENGE_MAGIC = 0x50584348


def connect(port, deadline):
    while time.time() < deadline:
        try:
            return socket.create_connection(('127.0.0.1', port), timeout=2)
        except OSError:
            time.sleep(0.05)
    raise RuntimeError('rank 0 never listened on %d' % port)


def read_challenge(s):
    """The 20-byte challenge ('' when none comes: a bootstrap without one)."""
    s.settimeout(1.0)
    data = b''
    try:
        while len(data) < 20:
            got = s.recv(20 - len(data))
            if not got:
                break
            data += got
    except socket.timeout:
        pass
    return data


def forged_hello(port, key, deadline):
    """A hello for rank 1 of 2 with a plausible address, proven with key."""
    s = connect(port, deadline)
    chal = read_challenge(s)
    nonce = chal[4:20] if len(chal) == 20 and struct.unpack('>I', chal[:4])[0] == \
        CHALLENGE_MAGIC else b'\0' * 16
    addr, node = b'\x01' * 64, b'rogue'
    hello = struct.pack('>IiiII', HELLO_MAGIC, 1, 2, len(addr), len(node))
    proof = hmac.new(key.encode(), nonce + hello, hashlib.sha256).digest()
    s.sendall(hello + proof + addr + node)
    return s


def listening_ports(pid):
    """TCP ports process pid listens on (from /proc/net/tcp{,6})."""
    inodes = set()
    for fd in os.listdir('/proc/%d/fd' % pid):
        try:
            link = os.readlink('/proc/%d/fd/%s' % (pid, fd))
        except OSError:
            continue
        if link.startswith('socket:['):
            inodes.add(link[8:-1])
    ports = []
    for table, family in (('/proc/net/tcp', socket.AF_INET), ('/proc/net/tcp6', socket.AF_INET6)):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            if f[3] == '0A' and f[9] in inodes:  # LISTEN
                hexip, hexport = f[1].split(':')
                raw = bytes.fromhex(hexip)
                # the kernel prints each 32-bit word in host (little-endian) order
                raw = b''.join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                ip = socket.inet_ntop(family, raw)
                ports.append((family, ip, int(hexport, 16)))
    return ports


def junk_to(family, host, port):
    if host in ('0.0.0.0', '::'):
        host = '127.0.0.1' if family == socket.AF_INET else '::1'
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(1)
        s.connect((host, port))
        s.sendall(b'\xde\xad\xbe\xef' * 64 + b'GET / HTTP/1.0\r\n\r\n')
        s.close()
        return 1
    except OSError:
        return 0  # listening on another address only


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    steps = 300
    # every rank prints its step lines (standalone, rank 0 alone does by default)
    job = ['--layers', '2', '--heads', '2', '--dim', '32', '--seq', '16', '--batch', '4',
           '--steps', str(steps), '--data', data, '--print-all-ranks']
    failures = 0
    port = free_port()

    def start(rank, secret, tag):
        env = dict(os.environ, PX_RANK=str(rank), PX_WORLD_SIZE='2',
                   PX_MASTER_ADDR='127.0.0.1', PX_MASTER_PORT=str(port),
                   PX_JOB_SECRET=secret, PX_CONNECT_TIMEOUT_MS='15000')
        out = open(os.path.join(work, '%s_rank%d.out' % (tag, rank)), 'w')
        err = open(os.path.join(work, '%s_rank%d.err' % (tag, rank)), 'w')
        return subprocess.Popen([rank_bin] + job, env=env, stdout=out, stderr=err)

    r0 = start(0, SECRET, 'rogue')
    deadline = time.time() + 30
    rogue = []
    s = connect(port, deadline)
    s.sendall(b'\x00garbage\xff' * 10)
    rogue.append(s)
    rogue.append(connect(port, deadline))  # silent
    rogue.append(forged_hello(port, '', deadline))
    rogue.append(forged_hello(port, 'not the secret', deadline))
    r1 = start(1, SECRET, 'rogue')
    # the UCX endpoints, once the world is up
    hit = 0
    t_end = time.time() + 20
    while time.time() < t_end and r0.poll() is None and not hit:
        out0 = open(os.path.join(work, 'rogue_rank0.out')).read()
        if 'step 1 ' in out0:
            for p in (r0, r1):
                for fam, ip, prt in listening_ports(p.pid):
                    hit += junk_to(fam, ip, prt)
        time.sleep(0.05)
    rcs = []
    for p in (r0, r1):
        try:
            rcs.append(p.wait(timeout=60))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rcs.append('hung')
    for s in rogue:
        s.close()
    err0 = open(os.path.join(work, 'rogue_rank0.err')).read()
    outs = [open(os.path.join(work, 'rogue_rank%d.out' % r)).read() for r in range(2)]
    refused = err0.count('bootstrap: refused a connection from 127.0.0.1')
    secret_refused = err0.count('does not hold this job\'s secret')
    ran = all(('step %d ' % steps) in o for o in outs)
    ok = rcs == [0, 0] and ran and refused >= 3 and secret_refused == 2 and hit > 0
    print('rogue on the bootstrap (4 connections) and on %d UCX ports: exit %s, all %d steps '
          '%s, %d refusals logged (%d for the secret) %s' % (
              hit, rcs, steps, ran, refused, secret_refused, 'ok' if ok else 'FAIL'))
    if not ok:
        for r in range(2):
            print('--- rank %d stderr:\n%s' % (
                r, open(os.path.join(work, 'rogue_rank%d.err' % r)).read()[-3000:]))
    failures += not ok

    # a rank of another job (the wrong secret) is refused, and fails
    port = free_port()
    t0 = time.time()
    r0 = start(0, SECRET, 'wrong')
    r1 = start(1, 'another job', 'wrong')
    try:
        rc1 = r1.wait(timeout=30)
    except subprocess.TimeoutExpired:
        r1.kill()
        rc1 = 'hung'
    took = time.time() - t0
    r0.kill()
    r0.wait()
    err0 = open(os.path.join(work, 'wrong_rank0.err')).read()
    ok = rc1 not in (0, 'hung') and 'does not hold this job\'s secret' in err0 and took < 10
    print('rank 1 with the wrong secret: exit %s after %.1f s, refused by rank 0 %s %s' % (
        rc1, took, 'does not hold this job\'s secret' in err0, 'ok' if ok else 'FAIL'))
    if not ok:
        print(err0[-2000:])
        print(open(os.path.join(work, 'wrong_rank1.err')).read()[-2000:])
    failures += not ok
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
