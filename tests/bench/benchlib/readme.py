"""docs/bench/README.md: the charts, the table, and exactly what was and was not measured."""
import os

from . import report

HOW = """\
## Reproduce

```sh
sudo packaging/install-deps.sh && meson setup build && ninja -C build
sudo tests/bench/run.py --full      # ~37 minutes; rewrites docs/bench/
sudo tests/bench/run.py --smoke     # seconds; writes to a temp dir (CI runs this)
```
The agent measured is `build/agent/kibotos-agent` (the project's default buildtype is
debugoptimized; the header above names the build that was measured). Options:
`--agent PATH` (default `build/agent/kibotos-agent`, or `$KIBOTOS_BUILD_ROOT/agent/kibotos-agent`),
`--families tput,conns,lat,mem,dns`, `--hold N`, `--modes routed,redsocks-copy,...`,
`--socks dante|microsocks`, `--runs N`, `--out DIR`, `--keep` (keep configs and logs).
With `-Dbenchmarks=true`, `meson test --suite bench` runs the smoke profile.

## The lab

```
guest ─veth─ ws ─veth─ socks ─veth─ inet          (the routed path: ws and socks forward)
             ws: redsocks + nft REDIRECT, or kibotos' TPROXY listener
       agent ─veth─ socks                          (kibotos-agent runs in its own namespace)
socks: dante :1080, microsocks :1081, stunnel :1443 -> the chosen SOCKS5 server
inet:  iperf3 :5201, bench_server (HTTP/hold) :8080, dnsmasq :53
```
Throwaway namespaces named `kbb<pid>{g,w,s,i,a}`, addresses in 10.231.0.0/16 that exist
only inside them; all of it is removed at the end, even on failure. Only traffic to
10.231.4.2 (and DNS) is diverted to a relay; everything else is routed.

## How each figure is taken
- **Throughput**: `iperf3 -t N [-P 4] [-R]` from guest to inet; receiver's figure. Each
  mode's four iperf3 runs start against a freshly restarted SOCKS server, once the
  machine is idle (CPUs less than 25% busy over 1 s, at most 20 s). They follow the
  mode's holds, and up to 65b5f1a they met the exits of the dante helpers forked for
  that mode's own count of idle connections (redsocks splice holds 3,332, the others
  9,500-10,000).
- **Relay CPU per GB**: utime+stime of the relay process from `/proc/PID/stat` across the
  iperf3 run, divided by the GB (10^9 bytes) received. The process's stat sums all its
  threads, io_uring's worker threads (iou-wrk, iou-sqp) included. Kernel work done in softirq context on behalf of the relay's sockets is
  charged to whatever runs at the time, so it is only partly counted (same for all relays).
- **Relay + Egress side CPU per GB**: the same, plus utime+stime of every process in the
  SOCKS server's namespace (dante's processes; stunnel for TLS) across the run. A
  helper that ends during the run is counted from its parent's reaped-children time,
  less what it had used before the run (at 65b5f1a that part was counted too, up to
  4 s/GB). On one host the two share work: see "Who pays for the relay's sending".
- **New connections/s and CPU per 1,000 connections**: `wrk -t1 -c C -d N -H 'Connection:
  close'` against `bench_server` in inet (one request per connection); relay CPU across
  the run divided by the connections completed.
- **Latency**: `bench_client lat` (C): 1,000 sequential connections, time from before
  `connect()` to the first response byte; p50 and p99. Since 61dcf38 latency is a pass
  of its own at the start of each run, ahead of that run's other families: the SOCKS
  server is restarted (dante keeps the helper processes the previous run's holds made
  it fork) and the lab's TIME_WAIT sockets (tens of thousands, left by wrk and the
  holds) are let drain to fewer than 1,000 (at most 70 s); then every mode in turn,
  started fresh, the order rotated by one each run. Each mode dials 100 unmeasured
  connections, then takes three series of 1,000, each a sample (15 in all: a p99 of
  1,000 is its 10th-worst connection), each once the machine is idle again (CPUs less
  than 25% busy over 1 s, at most 20 s). The routed column is the client's own floor
  (client + two forwarding hops + server).
- **Memory**: `bench_client hold` opens N connections, each confirmed end to end (the
  server echoes a byte), and keeps them idle. Relay RSS (`VmRSS`) before and while held,
  divided by N; system-wide `MemAvailable` drop divided by N (this counts kernel socket
  and pipe buffers of every party: client, relay, SOCKS server, server; compare it to
  the routed column, which has no relay and no SOCKS server). The same drop less what
  the lab's other processes (SOCKS server, servers, clients) gained in PSS meanwhile is
  the figure held to the target: dante forks and reaps helper processes at its own
  pace, which alone moved the raw drop by -9 to +196 KiB per connection between runs of
  one mode. Each memory reading waits 1 s and folds the kernel's per-CPU counters
  (`vm.stat_refresh`) first. The relay's open fds, plus the direct descriptors its
  rings hold (each ring's fdinfo lists them), must return to their idle count after the
  client closes (fd leak check). Each relay holds as many as its fds allow (below).
- **DNS**: `bench_client dns`: UDP queries (A bench.lab) with a window of in-flight
  queries, to dnsmasq in inet; the routed column queries it directly, kibotos' columns
  query an address nobody owns, so only the agent's interception can answer.
- Every figure is the median of the runs, with min and max, and its ratio to the routed
  path and to the best peer (the better of redsocks copy / splice) in the same run.
"""

PEERS = """\
## Peers
- **redsocks** (Debian 0.5) is the only one of the usual peers Debian packages. It has
  no TPROXY: it runs with nft `redirect` (REDIRECT, conntrack NAT) in the ws namespace
  and reads the original destination with `SO_ORIGINAL_DST` (`redirector = iptables`).
  Its splice mode is the `splice = on;` key of the `redsocks {}` section: redsocks(8)
  and its README do not document it, but redsocks 0.5's config parser accepts it
  (`redsocks -t` rejects an unknown key and accepts this one) and the binary carries the
  splice relay (`redsplice_*`).
- Not in Debian, so not in this harness: ipt2socks and hev-socks5-tproxy. For
  reference, measured earlier on this machine class (medians of 3, dante as the SOCKS
  server), the best of them, ipt2socks, spent about 0.8 relay CPU s/GB, 160 µs of relay
  CPU per connection (160 ms per 1,000), 0.2 KiB of RSS per idle connection, with p99
  connect+first byte 1.6 ms; one stream through any relay was about 4.3 Gbit/s, routed
  11 Gbit/s (bounded by the SOCKS server and clients sharing the 2 cores).
"""

SCALE = """## Host scale: thousands of Workspaces, thousands of connections

`sudo tests/bench/scale.py` (or `tests/bench/run.py --scale`) measures one agent as the
Workspace count grows (attach latency, fds and memory per Workspace, idle CPU, API
latency beside 10 writes/s, a policy update of all, re-attach after a restart) and with
thousands of held relayed connections, and Workspace A's connect latency while others
are created and deleted in a loop; it writes [scale/results.md](scale/results.md) (the
figures, with the run they come from), [scale/results.json](scale/results.json) and
[scale/scale.png](scale/scale.png). It is a separate run: `run.py --full` leaves `scale/`
as it is.
"""

DESIGN = """## What these numbers decided (and what was tried)
- **Bulk plain flows move by splice.** A direction of a plain SOCKS5 relay whose recv
  fills a whole 64 KiB provided buffer is bulk; from then on its bytes go socket ->
  pipe -> socket with non-blocking splice(2), waits are io_uring polls, no byte is
  copied through user space (`agent/relay/splice_pipe.*`). One iperf3 stream guest ->
  inet, relay CPU per GB: buffer ring copy 1.02 s/GB; splice with 64 KiB pipes ~0.6;
  256 KiB 0.43; 1 MiB 0.22 (fewer splice calls and wakeups per byte). io_uring's own
  IORING_OP_SPLICE is not used: the kernel always runs it in an io-wq worker thread
  (a context switch per call, a blocked thread per idle flow). Idle and chatty
  connections keep no pipe (no fds, no kernel memory); TLS flows copy (user-space
  OpenSSL needs the bytes; this kernel has no kTLS).
- **p99 connect + first byte: TIME_WAIT.** A first full run showed p99 16 ms (p50 0.4 ms): after
  thousands of connections the guest reused 4-tuples whose agent side sat in
  TIME_WAIT, and the prerouting rule `socket transparent 1` matched the new SYN to that
  TIME_WAIT socket, which answered with an ACK; the guest reset it and retried the SYN
  ~16 ms later. New SYNs now skip that rule and reach tproxy, which reopens TIME_WAIT
  onto the listener (test: `e2e_guest`, reconnecting from the same port sends no RST).
- **CPU per connection** is kernel TCP work (connect, the SOCKS5 round trips, FINs,
  the peers' softirq work run in the relay's context): the agent averages ~0.6
  context switches per relayed connection (completions are batched per wakeup), and
  syscalls cost ~0.1 µs here. Of the relay's CPU per connection (perf, wrk -c32, 4,400
  connections/s, at eb3e60d): send operations 20% (veth and loopback deliver inline, so
  each send runs the receiver's TCP input, and wakes it, in the relay's context),
  connect 15% (the whole three-way handshake with the SOCKS server's listener runs
  there too), close 16% (the FIN to the SOCKS server and its TIME_WAIT), passing the
  FIN to the guest 8.5%, recvs 7%, netfilter (conntrack and the TPROXY rules) 2.5%,
  user space ~5%, and ~21% scheduling: switching back in after a sleep
  (`finish_task_switch`, 12.7%) and waking peers on the other CPU (8.5%, spent with
  interrupts off in wake-ups). This machine is a VM where a cross-CPU wake-up is
  expensive: `perf bench sched pipe` takes 83 µs per round trip across its two CPUs
  and 3.3 µs on one. What is left to cut is packets, and the protocol and the peers
  decide most of them: a captured wrk connection is 8 packets guest-side and 14
  toward dante. The greeting and the CONNECT now go in one segment where the Egress's
  SOCKS5 server reads them (a probe per revision asks it; see "SOCKS5 requests sent
  with the greeting" below). Whether ≤ 0.5× the best peer holds depends on the
  machine. On the Intel Xeon VM of the runs up to 341db80 it did not (0.63-0.67×;
  67.9 against redsocks' ~108 µs at 341db80): kibotos' own TCP work above (send,
  connect, close, shutdown, recv, netfilter: ~69% of 82 µs, ~57 µs) was alone
  ~0.47× of redsocks' ~120 µs, leaving ~4 µs per connection for scheduling and user
  space together (that VM: ~17). redsocks, profiled the same way, pays more for the
  same packets (its connect, writev and shutdown take ~42% of ~155 µs, epoll_ctl 13%,
  pipes and splice 13%, user space 12%). On the AMD EPYC VM (from 09ec097; no
  data-plane change since 341db80 touches this path) everything costs more, redsocks
  most, and the target sits at its line. Three full runs there: 137 against 283 µs
  (0.48×) at 09ec097, 126 against 246 (0.51×) at 6ee276d, 142 against 277 (0.51×) at
  61dcf38, 105 against 230 (0.46×) at 62bd21f, 132 against 222 (0.60×) at ac2a4b4
  140 against 273 (0.51×) at 45c6e0e; the five runs of one mode spread wider
  than the gap to the line (kibotos 122-143 µs, redsocks splice 205-345 at 45c6e0e).
  Since the SOCKS5 greeting and CONNECT go in one segment to a server that reads them
  (below), the target is met: 77.5 against 195 µs (0.40×) at 5fbb9da, 87.9 against
  240 µs (0.37×) at 9c3a3e4 (both on a faster instance of this VM), 91.8 against
  234 µs (0.39×) at 65b5f1a and 79.2 against 259 µs (0.31×) in the run above
  (kibotos 73.7-99.3, redsocks copy 214-265). A profile at 45c6e0e (perf, wrk -c32): 95% of the
  relay's CPU is kernel; io_uring sends 23% (veth runs the receiver's stack in our
  context), connect to dante 19%, closes 14%, shutdown(2) 10%, receives 8%; user
  space 4.6%. The one saving left was sending the SOCKS5 greeting and CONNECT
  together (a round trip, a send and a receive less), done since (below).
- **SOCKS5 requests sent with the greeting.** dante 1.4.2 reads the credentials and
  the CONNECT that arrive in the greeting's segment; microsocks 1.0.3 reads one
  message per recv() and drops the rest, and its client then waits for ever (its issue
  #105 says so too). So the agent asks each Egress revision's server once, from a
  thread of its own: one connection sending greeting, credentials and a CONNECT to
  0.0.0.0:0 in one segment (refused by every server without traffic leaving its
  host: dante answers REP 8, microsocks REP 5 when asked in turn). An answer to that
  CONNECT switches the revision's dials to one segment; until then, for TLS Egresses
  (not asked) and for good after a one-segment dial gets no answer to its CONNECT
  (another server behind the endpoint), each request waits for the reply before it.
  Paired A/B against always one request per reply (dante, kibotos 1 thread, 6 rounds
  of wrk and of 1,000 sequential connections): relay CPU per connection 124.0 ->
  117.6 µs, new connections/s 2,488 -> 2,572, connect + first byte p50 829 -> 660 µs
  and p99 1,062 -> 992 µs (on the Intel VM of the earlier runs, sent unconditionally,
  it was inside the noise: 74.3 vs 76.7 µs). On a real network each dial saves a
  round trip to the Egress (two with credentials).
  CPU per GB toward the guest, at its line in those runs (0.50×, 0.56×), is met since
  the coalescing period went from 500 to 2,000 µs (61dcf38, below): 0.183 against
  0.467 s/GB (0.39×), and with it throughput moved above parity (1 stream up 1.14×,
  4 streams down 1.02×; all relays are bounded by dante and the shared cores, 6-8
  Gbit/s here; at 6ee276d 0.99× and 0.98×; at ac2a4b4 1 stream was 0.94× up and
  0.97× down, 7.00 and 6.79 Gbit/s against redsocks copy's 7.41 and 7.04, 1.22× and
  1.06× at 62bd21f, 1.23× and 1.18× at 45c6e0e, 1.05× and 1.23× at 9c3a3e4, 0.98×
  and 1.11× at 65b5f1a, and 1.09× and 1.11× in the run above, 6.37 and 7.08 against
  redsocks splice's 5.83 and 6.38: see "Each wait is sized" and SO_RCVLOWAT below).
  Four streams up are at parity: 1.01× in the run above (7.41 against 7.32 Gbit/s;
  the five runs spread 6.26-7.81 and 6.48-8.36; run by run 0.88-1.14×, median 0.97×;
  0.98× with 2 threads), 0.87× at 65b5f1a (its throughput met the exits of dante's
  helpers from the holds before it; see How each figure is taken), 0.98× at 9c3a3e4,
  1.06× at 5fbb9da. dante bounds it on this lab (see "Who pays for the relay's
  sending"). Four streams toward
  the guest cost more per GB than one at 61dcf38 (0.261 s/GB, 0.56× the best peer):
  each flow waited the same 2 ms for a quarter of the bytes. Ending every flow's wait
  on a grid shared by the loop (so the four wake together) did not change it (paired
  A/B, 6 rounds: 0.258 against 0.254 s/GB; one stream 0.198 against 0.204); not
  kept. Sizing each flow's wait from its rate did: 0.185 s/GB (0.47×) at 62bd21f,
  0.183 (0.41×) at ac2a4b4, 0.209 (0.44×) at 45c6e0e, 0.107 (0.20×) at 9c3a3e4, 0.119 (0.24×) at 65b5f1a, 0.108 (0.22×) in the run above. A wrk profile on this VM: dante takes 62% of the machine's CPU,
  kibotos 16%, of which user space is 3.5%; the rest is the TCP and netfilter work of
  the packets it sends and receives (and the receivers' work that veth runs inline).
- **Who pays for the relay's sending: four streams up are bounded by dante.**
  Sampled per process in the middle of 6 s iperf3 runs (this VM, 2 rounds), four
  streams up put dante's one I/O process at 0.95-0.98 of a core behind kibotos and at
  0.68-0.78 behind redsocks splice (1 stream: 0.84-0.86 against 0.63-0.68): dante
  spends more per byte behind kibotos (~1.0 against ~0.78 s/GB), and at a whole core
  it is what bounds the stream. The cause is where TCP sending runs on one host. A
  kibotos bulk flow splices up to ~2 MiB a wake-up into its socket toward dante; most
  of it waits there for the window, and goes out when dante's window updates come,
  which veth delivers inline in dante's recvmsg: our socket's transmit, and dante's
  socket's receive of it, are charged to dante. Paired A/B (5 rounds, fresh agent per
  variant, order rotated), TCP_NOTSENT_LOWAT on the flow's destination: at 64 or
  256 KiB, ~0.3 s/GB moved from dante to the relay (dante 1.005 -> 0.625-0.646,
  relay 0.161 -> 0.443-0.449 s/GB; redsocks splice 0.778 and 0.562), four streams up
  7.78 -> 8.23-8.28 Gbit/s (redsocks splice 7.27), relay + dante 1.17 -> 1.07-1.09
  s/GB (redsocks 1.34); at 1 MiB nothing changed. Not kept: the relay's CPU per GB
  would be 0.8× redsocks', over the 0.5× target, to relieve a SOCKS server that on a
  real network sits on another host (the window updates then arrive from the NIC and
  that sending runs in softirq, in no SOCKS server's time). Coalescing shorter or not
  at all did not lift four streams up either (paired, 6 rounds: 8 ms 6.82, 2 ms 6.59,
  off 6.71 Gbit/s; redsocks splice 5.95). The harness reports relay + Egress side CPU
  per GB since, so that this accounting shows. In the run above kibotos (1 thread)
  costs the two together less per byte than redsocks splice does: 1.32 against 1.62
  s/GB one stream up (0.81×), 1.20 against 1.41 four streams up (0.85×), 1.04 against
  1.55 and 0.97 against 1.48 down (0.67×, 0.66×); dante's own part, up, is 0.93-1.28
  s/GB behind kibotos and 0.60-1.03 behind redsocks splice. (At 65b5f1a this figure
  also counted what dante's helpers that ended during a run had used before it, up
  to 4 s/GB; see How each figure is taken.)
  A full run at db5fa6a is not published: its Egress side figure lost the time of
  dante's helper processes that ended mid-run (counted since from their parent's
  reaped-children time). Its other figures, on a slower hour of this VM (every
  relay's p99 3× the 9c3a3e4 run's): throughput 1 up 0.90×, 4 up 1.07× (2 threads: 0.93×
  and 0.88× up), 1 down 1.16×,
  4 down 1.17×; relay CPU per GB 0.23-0.29×; per connection 0.43×; connections/s
  1.24×; p99 1.19× (3,315 against 2,783 µs; the runs spread 1,206-24,232 and
  968-8,409); RSS per idle connection 0.30×; 10,000 idle connections, 0 errors.
- **p99 connect + first byte: at parity, noise-bound.** Latency through any relay here is mostly dante's:
  routed 100 µs at p50, through a relay 760-880. The relays' own share is small and
  alike, so the ratio is noise-bound: on the quiet machine (`--families lat`, 5 runs,
  at 09ec097) 1,122 against redsocks copy 1,124 µs (1.00×; p50 744 against 746).
  Measured among the other families (up to 6ee276d), a mode's latency depended on its
  place in the run: after the hold family (10,000 connections through dante, which
  keeps the helper processes it forks) every relay was slower for minutes, also
  through a fresh agent (kibotos 1 thread p50 805 µs fresh, 1,034 after a hold, 1,042
  after restarting the agent, in one lab), and the 1-thread mode measured slower than
  the 2-thread one in full runs (p50 981 against 771 at 6ee276d) but not when the two
  alternated in one lab after a hold (1,216 against 1,228). Since 61dcf38 latency is a
  pass of its own (see How each figure is taken). Kibotos with 1 thread has had the
  lowest p50 of all relays since (761 µs at 61dcf38, 678 at 62bd21f, 734 at ac2a4b4,
  763 at 45c6e0e; redsocks 780-881; 541 at 9c3a3e4, redsocks 624-671; 653 at
  65b5f1a, redsocks 685-691; 586 in the run above, redsocks 689-763); its p99 was
  1.09× the best peer at 61dcf38
  (1,404 against 1,289), 0.85× at 62bd21f (993 against 1,164), 0.90× at ac2a4b4
  (1,091 against 1,213), 0.94× at 45c6e0e (1,222 against 1,298), 0.96× at 9c3a3e4
  (901 against 941), 1.03× at 65b5f1a (1,155 against 1,124) and 0.82× in the run
  above (1,118 against 1,366; with 2 threads 1,056). The p99 of one series of 1,000 spreads 773-4,268 µs for kibotos and
  827-3,986 for redsocks copy across those runs, so the median of 15 moves by a tenth
  or more between runs: at parity within that noise; met in five of the seven runs
  listed here, missed at 61dcf38 and 65b5f1a (by 9% and 3%; 1.19× in the unpublished
  run at db5fa6a).
- **A reply and its FIN leave as one segment; no Nagle toward the guest.** When a
  recv's completion says the source has more queued (`IORING_CQE_F_SOCK_NONEMPTY`:
  bytes, or the FIN already received), the relay sends what it got with `MSG_MORE`;
  the next send, or the shutdown that passes the FIN on, fills the same segment. The
  next recv completes at once, so nothing stays corked. A/B, 3 runs each, wrk, kibotos
  1 thread: relay CPU per 1,000 connections 79.9 -> 65.8 ms, connections/s 3,794 ->
  4,497; packets sent in the relay's context per connection 12.3 -> 10.6 (perf
  `net:net_dev_xmit`); a captured guest-side exchange is 8 packets, the reply carrying
  the FIN. The guest sockets also get TCP_NODELAY (on the transparent listeners,
  inherited): with Nagle, a small write that followed another within the guest's
  delayed-ACK time waited for that ACK, 43.5 ms instead of 2.2 ms (test:
  `dataplane_relay`, two small server writes 2 ms apart). Bulk CPU per GB did not move
  with it (A/B, 2 × 3 runs: 0.353 and 0.363 s/GB down with it, 0.347 and 0.403 without).
- **Upstream sockets are io_uring direct descriptors** (`dataplane.direct_descriptors`,
  kernel 6.8 or later, probed at start). The relay opens each upstream socket into a
  slot of its loop's ring (`IORING_OP_SOCKET`, then `TCP_NODELAY` by
  `SOCKET_URING_OP_SETSOCKOPT`, then the connect, all in one submit), sends the SOCKS5
  messages by send SQEs, and closes it by `close_direct` (after `SO_LINGER` 0 by SQE
  for a reset). A relayed connection therefore holds one fd, the guest's, and a ring
  slot: RLIMIT_NOFILE bounds the fd table and each ring's slot table apart, so 10,000
  connections fit under this machine's hard limit of 20,000 (the peers, at 2 fds per
  connection, hold 9,500). A flow that turns bulk gets a plain fd for splice
  (`IORING_OP_FIXED_FD_INSTALL`). Passing the guest's FIN on has no inline io_uring
  operation (`IORING_OP_SHUTDOWN` always runs in an io-wq worker): when the endpoint
  closed first, the common case, the close that follows sends the FIN; otherwise the
  slot's socket gets a plain fd (`IORING_OP_FIXED_FD_INSTALL`, inline) and
  shutdown(2) runs on it; only out of fds does `IORING_OP_SHUTDOWN` run, tracked so
  that the slot is not closed or reused under it. A/B (3 runs each, wrk and 1,000
  sequential connections, kibotos 1 thread): relay CPU per 1,000 connections 69.7
  ms (68.4-77.7) with slots, 73.4 (72.5-74.3) with plain fds; connections/s 3,995
  and 3,754; p99 latency 1,152 and 1,218 µs. Under wrk the guest closes first in
  ~13% of connections (wrk closes once it has parsed the reply, sometimes before the
  SOCKS server's FIN came): 2,691 io-wq shutdowns in 5 s (~22,000 connections), each
  a hand-off to a kernel worker thread that then contends for the ring's lock. With
  the plain fd instead, none; relay CPU per connection 68.0 -> 66.2 µs (paired, 18
  rounds of 5 s, lower in 11: small, inside the noise of one round, but no worker
  threads come and go under load).
- **A spliced flow whose sender is slower than the relay coalesces its reads**
  (`dataplane.splice_coalesce_us`, 2000 since 61dcf38, 500 before). Downstream of the SOCKS server the relay
  is faster than its sender, so each small burst woke the loop: one iperf3 stream
  inet -> guest made ~5,000 wake-ups a second of ~160 KiB each (perf: 22,000
  splice calls and 5,100 `io_uring_enter` a second, against 700 wake-ups of ~1 MiB
  guest -> inet, where the SOCKS server's window makes the relay wait), and a fifth
  of the relay's CPU in that direction was spent spinning on the upstream socket's
  lock against the softirq delivering the next burst. Now a read that empties the
  source is followed by a 500 µs timeout instead of a POLLIN wait; the next read
  takes what gathered, and a period with nothing ends the coalescing. A/B, tput
  family, 3 runs each with both redsocks modes in the same runs: relay CPU per GB
  1 stream down 0.347 -> 0.248 s/GB, 4 streams down 0.370 -> 0.215, 1 stream up
  0.274 -> 0.263 (unchanged: it was already batched); throughput 4 streams down
  7.02 -> 7.73 Gbit/s, 1 stream down 6.26 -> 5.55 (redsocks splice 5.43 and 5.78 in
  those runs). Single runs: 1,000 µs 0.209 s/GB, 5.33 Gbit/s; 250 µs 0.337 s/GB,
  5.29 Gbit/s. Between the published full runs (d73a466 without, af0c086 with;
  medians of 5): CPU per GB 1 stream down 0.345 -> 0.269 (0.65× -> 0.50× the best
  peer), 4 streams down 0.389 -> 0.274; throughput 4 streams down 6.45 -> 6.66, but
  1 stream down 6.49 -> 5.23 Gbit/s (1.23× -> 1.06× redsocks splice): a single flow
  pays for the batching on these 20 µs links when its sender uses BBR, this host's
  default and so the lab's. With cubic as the default (`sysctl
  net.ipv4.tcp_congestion_control=cubic` before the lab is built; 5 runs each,
  kibotos only) coalescing raised 1-stream throughput inet -> guest 17.3 -> 18.4
  Gbit/s and 4-stream 18.8 -> 19.8, and cut CPU per GB 0.173 -> 0.107 s/GB (every
  path is ~3× faster there: BBR's pacing costs every sender in this lab).
  `splice_coalesce_us: 0` gives the old behaviour. Only bulk (spliced) flows wait,
  only bytes that arrive within the period of the previous read, and at most that
  long (test: `dataplane_relay`, a marker 5 ms after 4 MiB arrives after the wait,
  markers after a quiet period at once). 2,000 µs instead of 500 (61dcf38; A/B, 6
  rounds in one lab, a fresh agent per setting and round, the order rotated; 4 s
  iperf3 each): relay CPU per GB 1 stream down 0.284 -> 0.213 s/GB (lower in 6 of
  6 rounds), 4 streams down 0.381 -> 0.271 (6 of 6); throughput 6.45 -> 6.48 and
  6.87 -> 7.22 Gbit/s; 1,000 µs gave 0.238 and 0.321; 1 stream up 0.173 -> 0.160
  s/GB (4 rounds). A longer wait lets the reads after it fill the 1 MiB pipe, read
  again at once and so move more per wake-up. The cost: the tail of a burst (the last
  bytes of a large reply that came within 2 ms of the previous read, or a FIN right
  behind them) waits up to 2 ms.
- **Each wait is sized from the flow's rate** (`agent/relay/gather_wait.h`, from
  62bd21f; `splice_coalesce_us` is now the longest wait, 8,000 µs). A fixed wait
  serves one rate: 2 ms took ~2 MiB a wake-up from one iperf3 stream toward the guest
  at ~1 GB/s, but ~0.6 MiB from each of four at ~300 MB/s, and 4 ms cut four streams'
  CPU per GB by a quarter but stalled one stream (8.49 -> 5.41 Gbit/s: its receive
  window filled before the wait ended). Now the first wait after a burst is the
  longest, and each later one aims at 2 MiB from what the previous one gathered (at
  most a quarter of the source's receive buffer, so a young connection's small window
  is never waited on), between a quarter of the longest (2 ms) and the longest. A/B
  against the fixed 2 ms (5 rounds, a fresh agent per setting and round, order
  rotated, 4 s iperf3 each): 4 streams down 0.202 -> 0.160 s/GB (lower in 5 of 5),
  9.50 -> 9.74 Gbit/s; 1 stream down 0.153 -> 0.138 s/GB but 8.64 -> 7.61 Gbit/s
  (lower in 3 of 5; 7.20, 6.98 and 6.79 in the full runs at 61dcf38, 62bd21f and
  ac2a4b4); 1 stream up unchanged (0.148 and 0.146 s/GB, 8.9 Gbit/s). Tried first:
  no floor (waits down to a sixteenth of the longest): four streams the same, but one
  stream down 0.173 -> 0.199 s/GB and 7.64 -> 6.76 Gbit/s (8 rounds, 7 of 8 worse):
  its waits shrank to ~1.5 ms, since the bytes that come while the pump runs count as
  gathered; aiming at 4 MiB stalled one stream (2.7 Gbit/s): with a window that holds
  less, no wait gathers the aim, so each one grows to the longest. What one stream down
  can still lose (traced on the relay of ac2a4b4, unchanged since; 3 of 8 runs): one
  wait gathers little (63 KiB),
  the next is sized to the longest, and each 8 ms wait then gathers only 250-700 KiB
  for ~100 ms, with tcpi_rcv_ssthresh at 6-18 MB (the window is not the limit).
  Linux ACKs at once only if the window it would advertise does not shrink
  (`__tcp_ack_snd_check`), so once rcv_ssthresh nears the buffer, bytes queued during a
  wait hold the ACKs until the relay reads: the sender (dante, BBR) is then clocked by
  the waits, a window per wait whatever its length. Tried against it (A/B, 6-10
  rounds): the first wait at the shortest and at most doubling (1 down 6.24 against
  5.71 Gbit/s in one series, 6.41 against 6.43 in another), and waits that never
  lengthen after the first (7.00 against 6.76); each cost four streams 5-9% CPU per
  GB and neither left the rounds' spread (5.2-7.9 Gbit/s for one binary), so neither
  was kept. What did: SO_RCVLOWAT on the source at the wait's target
  (2 MiB, at most a quarter of its receive buffer) while the flow waits, back to 1
  before it waits for readability. `__tcp_ack_snd_check` ACKs at once while the
  unread bytes are below SO_RCVLOWAT, so the sender is no longer clocked by the waits.
  On the faster instance of this VM where the first run at 5fbb9da measured one
  stream toward the guest at 3.69 Gbit/s (0.54× redsocks splice; every wait length
  stalled it: 2 ms longest 5.0, none 7.4 Gbit/s but 0.35 s/GB), paired A/B (6 rounds,
  4 s iperf3, a fresh agent per round, order rotated): 1 stream down 3.92 -> 7.76
  Gbit/s (higher in 6 of 6) and 0.114 -> 0.108 s/GB; 4 streams down 10.04 -> 10.21
  Gbit/s, 0.101 -> 0.094 s/GB; 1 stream up 6.76 -> 6.86 Gbit/s, 0.200 -> 0.159 s/GB.
  Test: `dataplane_relay`, 512 MiB through 32 ms waits takes < 2.2× the time with no
  waits (2.7× without SO_RCVLOWAT, 1.7× with). The waits' state lives with the flow's pipe, so connections that never
  turn bulk carry none (in RelayConnection it cost 64 bytes each: relay RSS per idle
  connection 0.362 -> 0.426 KiB at 62bd21f, 0.364 at ac2a4b4).
- **A coalescing read that took less than half the pipe ends the pump.** The read
  after a wait took what gathered (~170 KiB at 5 Gbit/s), but the pump then read
  again straight after writing it, taking the few KiB that came meanwhile, and again
  until the source was empty: each read takes the upstream socket's lock against the
  softirq delivering the next burst (9% of the relay's CPU spinning there in this
  direction, perf) and sends an ACK, which runs the SOCKS server's next transmit in
  the relay's context (13%). Now a read that took less than half the pipe counts as
  emptying the source: the bytes go out and the flow waits. A/B, paired in one lab
  (the behaviours alternated per 4 s iperf3 run): 1 stream inet -> guest 0.327 ->
  0.285 s/GB (lower in 6 of 6 rounds), 4.78 and 4.74 Gbit/s; 4 streams 0.278 ->
  0.246 (4 of 4), 6.80 -> 7.45 Gbit/s; 1 stream guest -> inet unchanged (0.260 and
  0.263 s/GB, 5.59 Gbit/s both: there the reads fill the pipe while the relay waits
  for the SOCKS server's window). The cost: a FIN right behind the last bytes is seen
  one wait later.
- **The guest-facing sockets use cubic** (`dataplane.guest_congestion_control`, set
  on the transparent listeners, inherited by accepted sockets). The hop to the guest
  is a local link; BBR's pacing there only adds timers and smaller bursts. A/B, 3
  runs each, kibotos 1 thread: relay CPU per GB toward the guest 0.565 -> 0.386 s/GB
  (1 stream) and 0.604 -> 0.431 (4 streams), throughput inet -> guest 4.9 -> 5.9
  Gbit/s; the upstream socket keeps the host's default (the Egress is usually
  across a real network).
- **Tried for the down direction and for CPU per connection, and not kept** (one
  stream inet -> guest; wrk and 1,000 sequential connections; kibotos 1 thread):
  - io_uring min-wait batching (kernel 6.13's `min_wait_usec`, 64 completions or
    100-300 µs per wakeup, only while a bulk flow splices): splice calls per GB
    halved (51,700 -> 25,000 in 4 s) and context switches halved (17,300 -> 9,000),
    yet relay CPU per GB stayed 0.53-0.54 s/GB. The cost is per packet in the kernel
    (the receivers' TCP work runs in the sender's softirq), not per wakeup. Applied
    to every wait it cost more per connection (94 vs 73 ms per 1,000) and p50 (1.2
    vs 0.8 ms).
  - Delayed ACKs on the upstream socket during the SOCKS5 exchange (`TCP_QUICKACK` 0
    before the connect and before the greeting): the handshake's last ACK and the
    ACK of the method reply ride on the greeting and the CONNECT (14 -> 12 packets
    toward dante per connection, tcpdump), but relay CPU per connection did not move
    (paired, 8 rounds of 5 s: 71.9 vs 72.0 µs): the first is a cheap pure ACK, the
    second was sent in the SOCKS server's context anyway.
  - Congestion control. The machine's default is BBR, which paces every socket of
    the lab with hrtimers. With cubic for the whole lab, every relay is ~2.5× faster
    and cheaper (kibotos 13 Gbit/s, 0.10 s/GB up, 0.25 down; redsocks splice 11
    Gbit/s, 0.15 and 0.29), so the ratios change little (0.66× up, 0.86× down). The
    published runs keep the machine's default.
  - Left for later: a sockmap/sk_skb redirect of plain flows after the SOCKS5 reply
    (the bytes would move in the kernel without waking the relay). It needs proof that
    a FIN is never passed on ahead of redirected bytes still queued, and backpressure
    from a slow destination (the redirect consumes the source's receive queue).
- **TLS dials resume, one ticket each.** OpenSSL marks a TLS 1.3 session spent once a
  handshake resumed it (RFC 8446 C.4: a ticket is for one connection; reusing one links
  connections). The relay used to hand every dial the revision's newest session, so
  a dial that started after another dial's resumption and before that connection's
  new ticket was read offered nothing: under wrk -c32, 13% of the dials through
  stunnel were full handshakes (certificate chain verified and all), 0% at -c1. Each
  revision now keeps up to 64 sessions, hands each TLS 1.3 ticket to one dial (newest
  first), skips spent and expired ones; a burst of dials beyond the tickets in hand
  shares the one handed out last, each dial on its own copy (one ticket per dial
  alone made two of four dials of a burst after the first dial full handshakes; one
  shared object made it depend on timing: a dial that started after the first
  resumption of the burst completed found it spent, as one CI run did under ASan);
  TLS 1.2 sessions are reused as before.
  Paired A/B (one lab, the two behaviours alternated per 5 s wrk run, 8 rounds):
  full handshakes 13% -> 0% after the first 32 dials, relay CPU per connection 547 ->
  483 µs (lower in 7 of 8 rounds), connections/s +4% (tests: the relay unit suite, a
  dial started after the last ticket's resumptions completed, before a new ticket
  came, resumes, and a burst of four on two tickets all resume; `dataplane_tls`, the same burst through
  stunnel). What a resumed
  TLS 1.3 handshake still costs is mostly the X25519 key share (forward secrecy:
  `psk_dhe_ke`) and OpenSSL 3.0's per-handshake algorithm fetches.
- **Idle RSS** is mostly shared library pages (libprotobuf, libstdc++, libcrypto,
  libsqlite3: the control plane lives in the same process): of ~14 MiB with no
  workspace, ~12 MiB is file-backed and ~2 MiB anonymous. Per-connection RSS is what
  the data plane adds.
"""

TARGETS = [
    # (target text, metric, comparison to the best peer)
    ("relay CPU per GB ≤ 0.5× the best peer (1 stream up)", "cpu_gb_1_up", 0.5, "le"),
    ("relay CPU per GB ≤ 0.5× the best peer (1 stream down)", "cpu_gb_1_down", 0.5, "le"),
    ("relay CPU per GB ≤ 0.5× the best peer (4 streams up)", "cpu_gb_4_up", 0.5, "le"),
    ("relay CPU per GB ≤ 0.5× the best peer (4 streams down)", "cpu_gb_4_down", 0.5, "le"),
    ("relay CPU per connection ≤ 0.5× the best peer", "cpu_ms_per_1k_conn", 0.5, "le"),
    ("throughput ≥ 1.0× the best peer (1 stream up)", "tput_1_up", 1.0, "ge"),
    ("throughput ≥ 1.0× the best peer (1 stream down)", "tput_1_down", 1.0, "ge"),
    ("throughput ≥ 1.0× the best peer (4 streams up)", "tput_4_up", 1.0, "ge"),
    ("throughput ≥ 1.0× the best peer (4 streams down)", "tput_4_down", 1.0, "ge"),
    ("connections/s ≥ 1.0× the best peer", "conn_per_s", 1.0, "ge"),
    ("p99 connect+first byte ≤ the best peer", "lat_p99_us", 1.0, "le"),
    ("relay RSS per idle connection ≤ the best peer", "rss_kib_per_conn", 1.0, "le"),
    ("system memory (MemAvailable, less the lab's other processes) per idle connection ≤ the best peer",
     "sys_net_kib_per_conn", 1.0, "le"),
    ("system memory (relay RSS + kernel) per idle connection ≤ the best peer", "lab_kib_per_conn", 1.0, "le"),
]


def targets_section(results):
    k = results["modes"].get("kibotos-1t", {})
    lines = ["## Targets (kibotos SOCKS5, 1 thread, against the best redsocks mode)", ""]
    if not k.get("available"):
        lines.append("Not assessed: kibotos-agent was not available in this run "
                     f"({k.get('reason', 'not run')[:200]}).")
        return "\n".join(lines)
    lines += ["| target | measured | met |", "|---|---|---|"]
    for text, key, bound, cmp in TARGETS:
        fig = k["metrics"].get(key)
        if not fig:
            lines.append(f"| {text} | not measured | – |")
            continue
        if "ratio_best_peer" not in fig:
            lines.append(f"| {text} | {report._fmt(fig['median'])}; no ratio: the best peer's figure is "
                         "at or below zero (noise) | – |")
            continue
        r = fig["ratio_best_peer"]
        ok = r <= bound if cmp == "le" else r >= bound
        lines.append(f"| {text} | {r:.2f}× ({report._fmt(fig['median'])}) | {'yes' if ok else '**no**'} |")
    held = k["metrics"].get("hold_errors")
    leak = k["metrics"].get("fd_leak")
    n = results["meta"]["hold_n"]
    if held is not None:
        lines.append(f"| {n} concurrent relayed connections, no error, no fd leak | errors max "
                     f"{held['max']:.0f}, fd leak max {leak['max'] if leak else '?'} | "
                     f"{'yes' if held['max'] == 0 and leak and leak['max'] == 0 else '**no**'} |")
    return "\n".join(lines)


def notes_section(results):
    m = results["meta"]
    lines = ["## Notes on this run", ""]
    if m.get("hold_n_wanted"):
        lines.append(
            f"- Idle connections held: {m['hold_n']}, not {m['hold_n_wanted']}. This machine's "
            f"RLIMIT_NOFILE hard limit is {m['nofile']} and the session lacks CAP_SYS_RESOURCE "
            "to raise it.")
    if m.get("hold_n_peers", m["hold_n"]) < m["hold_n"]:
        lines.append(
            f"- The peer relays and kibotos behind TLS held {m['hold_n_peers']} idle connections, "
            f"kibotos plain SOCKS5 {m['hold_n']}: "
            f"this machine's RLIMIT_NOFILE hard limit is {m['nofile']} and the session lacks "
            "CAP_SYS_RESOURCE to raise it. A peer needs 2 fds per relayed connection (redsocks' "
            "splice mode 6: it adds two pipes), so at most about (limit − 1,000) / 2 fit in one "
            "process. kibotos needs 1: each upstream socket is an io_uring direct descriptor, a "
            "slot in its loop's ring that RLIMIT_NOFILE bounds apart from the fd table. The TLS "
            "mode is capped by stunnel, one process with 2 fds per connection in front of the "
            "SOCKS server. The per-connection figures divide by each mode's own count.")
    for name, v in results["modes"].items():
        short = [h for h in v.get("raw", {}).get("hold", []) if h.get("errors")]
        if not short:
            continue
        held = sorted(h["held"] for h in short)
        why = ""
        if name == "redsocks-splice":
            why = (f" Its splice mode keeps two pipes per idle connection, 6 fds in all: "
                   f"{held[-1]:,} × 6 = {held[-1] * 6:,} of the {m['nofile']} allowed.")
        lines.append(
            f"- {v['label']} established {held[0]:,}"
            + (f" to {held[-1]:,}" if held[-1] != held[0] else "")
            + f" of the {short[0]['n']:,} idle connections in {len(short)} of its runs; the "
            f"others failed (\"idle connections not established\").{why} Its per-connection "
            "memory figures divide by the connections it held.")
    harnessed = [v for v in results["modes"].values() if v.get("driver") == "harness"]
    if harnessed:
        lines.append(
            "- ‡ " + ", ".join(v["label"] for v in harnessed) + ": measured through "
            "`tests/integration/dataplane/relay_harness`, the agent's real data plane "
            "(DataplaneRuntime, netns attachment, io_uring loops) commanded on stdin, without "
            "the daemon, because the daemon did not relay in this run ("
            + harnessed[0].get("driver_note", "")[:300] + "). The relay process measured is "
            "relay_harness; DNS resolvers cannot be set through it.")
    if results["modes"].get("kibotos-1t", {}).get("dns_driver") == "dns_harness":
        lines.append("- kibotos' DNS figures were measured through `tests/integration/dns/dns_harness` "
                     "(the agent's DnsService and netns attachment, commanded on stdin, without the "
                     "daemon); the udp Resolver goes through dante (UDP ASSOCIATE; microsocks has "
                     "none), the tcp Resolver through the chosen SOCKS5 server.")
    t1 = results["modes"].get("kibotos-1t", {}).get("metrics", {})
    t2 = results["modes"].get("kibotos-2t", {}).get("metrics", {})
    pairs = [(k, lbl) for k, lbl in (("tput_1_up", "1-stream throughput"), ("tput_4_down", "4-stream throughput"),
                                     ("conn_per_s", "connections/s"), ("cpu_gb_1_up", "CPU per GB"),
                                     ("cpu_ms_per_1k_conn", "CPU per connection"))
             if k in t1 and k in t2 and t1[k]["median"]]
    if pairs:
        lines.append("- dataplane.threads 2 vs 1 (2 cores shared with the SOCKS server, servers and "
                     "clients, so a second loop has little idle core to use): "
                     + ", ".join(f"{lbl} {t2[k]['median'] / t1[k]['median']:.2f}×" for k, lbl in pairs) + ".")
    routed = results["modes"].get("routed", {}).get("metrics", {})
    if "lat_p50_us" in routed:
        lines.append(f"- Latency client floor (the routed path: client, two forwarding hops, server): "
                     f"p50 {routed['lat_p50_us']['median']:.0f} µs, p99 {routed['lat_p99_us']['median']:.0f} µs.")
    lines += [
        "- The machine has 2 cores shared by the relay, the SOCKS server, stunnel, the "
        "servers and the clients; throughput through any relay is bounded by them.",
        f"- Load average at start / end: {m['load_start']} / {m.get('load_end', '?')}. "
        "Other work on the machine moves the MemAvailable figures most (they are machine-wide); "
        "the 'relay RSS + kernel' row (the relay's RSS, page tables and thread stacks, plus "
        "the kernel's slab, which holds every socket's and pipe's kernel state) is the "
        "steadier estimate of what a relayed connection costs the machine; it leaves out the "
        "SOCKS server's own processes, their stacks and page tables (dante forks helpers as "
        "load grows and reaps them later).",
        "- In each run, memory is measured first, right after the relay starts, after one "
        "unmeasured hold (so that dante has forked its helpers already); the relay's RSS per "
        "connection is counted from its RSS when fresh.",
        "- The TLS column's lab and system memory include stunnel's side (a thread and TLS "
        "buffers per connection), which the plain columns do not have.",
        "- Runs are interleaved: run 1 of every mode in the column order of the table, then "
        "run 2, and so on; each run starts its relay afresh.",
    ]
    return "\n".join(lines)


def write(out_dir, results):
    m = results["meta"]
    parts = ["# kibotos-agent data-plane benchmarks", "",
             f"One run of `tests/bench/run.py --{m['profile']}` on this machine, at this commit:", "",
             report.meta_lines(results), ""]
    charts = results.get("charts", {})
    if charts:
        parts.append("## Charts\n")
        for fam in ("throughput", "cpu", "memory", "connections", "latency"):
            if fam in charts:
                parts.append(f"![{fam}]({charts[fam]})\n")
    parts += ["## Results\n", report.markdown_table(results), ""]
    if report.moves_text(results):
        parts += [report.moves_text(results)]
    parts += ["Raw samples and per-run details: [results.json](results.json).", ""]
    parts += ["## What was measured, and what was not\n"]
    measured = [v["label"] for v in results["modes"].values() if v.get("available")]
    parts.append("Measured: " + (", ".join(measured) or "nothing") + ".")
    parts.append("")
    if results["not_measured"]:
        parts += ["Not measured:", ""] + [f"- {x}" for x in results["not_measured"]] + [""]
    errors = [f"- {v['label']}: {v['error']}" for v in results["modes"].values() if v.get("error")]
    if errors:
        parts += ["Errors during the run:", ""] + errors + [""]
    parts += [targets_section(results), "", notes_section(results), "", SCALE, DESIGN, PEERS, HOW]
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("\n".join(parts))
