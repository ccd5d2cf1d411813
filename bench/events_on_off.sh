#!/usr/bin/env bash
# What KV events cost the daemon: engine operations per second of a kvtierd
# that records block events and publishes them on ZeroMQ to a live
# subscriber, against the same kvtierd with events off, in one run.
#
# Two kvtierd start side by side with the same flags (64 MiB host tier, no
# device, ssd or metrics), one with --events-endpoint ipc://...; a pyzmq
# subscriber reads the PUB socket for the whole run, decoding every batch
# (msgpack, as a router does) and counting sequence gaps. The load is the
# C++ `kvtier bench` (one thread and one connection per client):
#   put     fresh 16-block prompts (ALLOCATE, fill, COMMIT); the host tier
#           is full, so each op stores 16 blocks and evicts about as many:
#           the most events per operation any workload makes;
#   mixed   2:1:1 lookup:get:put of 16-block prompts;
#   lookup  bench_control_plane: LOOKUP of a cached 16-key chain, the
#           clients' connections driven from one thread: no events at all,
#           so its ratio is the noise floor of the comparison.
# Each round runs every load against both daemons back to back, the order
# alternating from round to round; the ratio on/off is the median of the
# rounds'. Goal: >= 0.95x. Wall-clock ratios swing with whatever else
# runs on the machine, so the daemon's CPU time per operation (utime + stime
# of all its threads, publisher and ZeroMQ's I/O thread included, from
# /proc) is printed too. With the default --busy-poll-us 200 it includes the
# engine's spinning between requests; DAEMON_FLAGS="--busy-poll-us 0"
# leaves the work alone.
#
# Usage: bench/events_on_off.sh [build-dir]   (default build-release; a
# Release build). Needs pyzmq and msgpack in PYTHON (default .venv/bin/python,
# scripts/python-env.sh). ROUNDS (default 12), SECONDS_PER_RUN (default 0.5)
# and CLIENTS (default 2) trade time for stability; DAEMON_FLAGS adds flags
# to both daemons (e.g. "--busy-poll-us 0"); SUBSCRIBER=0 publishes to no
# one (ZeroMQ then drops each batch at once). ~1 minute.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-release}
rounds=${ROUNDS:-12}
secs=${SECONDS_PER_RUN:-0.5}
clients=${CLIENTS:-2}
python=${PYTHON:-.venv/bin/python}
"$python" -c 'import zmq, msgpack' 2>/dev/null ||
  { echo "$python lacks pyzmq or msgpack: scripts/python-env.sh" >&2; exit 1; }
cmake --build "$build" --target kvtierd kvtier bench_control_plane >/dev/null

dir=$(mktemp -d /tmp/kvtier-events-bench-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

common=(--no-reserve-memory --host-capacity 64MiB --device off --ssd-dir "" --metrics-address "")
read -r -a extra <<<"${DAEMON_FLAGS:-}"
common+=("${extra[@]}")
"$build/daemon/kvtierd" --socket "$dir/off.sock" "${common[@]}" 2>"$dir/off.log" &
pids+=($!)
"$build/daemon/kvtierd" --socket "$dir/on.sock" "${common[@]}" \
  --events-endpoint "ipc://$dir/events.ipc" 2>"$dir/on.log" &
pids+=($!)
for _ in $(seq 100); do
  [ -S "$dir/off.sock" ] && [ -S "$dir/on.sock" ] && break
  sleep 0.1
done

# The subscriber: counts batches and events and the batches it missed (seq
# gaps), and writes them with its own CPU time when terminated.
cat >"$dir/subscriber.py" <<'EOF'
import resource, signal, sys
import msgpack, zmq

endpoint, out = sys.argv[1], sys.argv[2]
sub = zmq.Context().socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(endpoint)
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
batches = events = missed = 0
expected = None
while not stop:
    if not sub.poll(100):
        continue
    _topic, seq, payload = sub.recv_multipart()
    seq = int.from_bytes(seq, "big")
    if expected is not None and seq > expected:
        missed += seq - expected
    expected = seq + 1
    batches += 1
    events += len(msgpack.unpackb(payload)[1])
ru = resource.getrusage(resource.RUSAGE_SELF)
with open(out, "w") as f:
    f.write(f"{batches} {events} {missed} {ru.ru_utime + ru.ru_stime:.1f}\n")
EOF
if [ "${SUBSCRIBER:-1}" = 1 ]; then
  "$python" "$dir/subscriber.py" "ipc://$dir/events.ipc" "$dir/subscriber.out" &
  sub_pid=$!
  pids+=("$sub_pid")
  sleep 0.5  # ZeroMQ's slow joiner: the subscription reaches the PUB socket
fi

ops=(put mixed lookup)
declare -A pid_of=([off]=${pids[0]} [on]=${pids[1]})
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }  # utime + stime, all threads
hz=$(getconf CLK_TCK)
# load daemon seed: runs one load against one daemon; prints its ops/s.
load() {
  if [ "$1" = lookup ]; then
    "$build/bench/bench_control_plane" --socket "$dir/$2.sock" --clients "$clients" --keys 16 \
      --seconds "$secs" --json | sed -n 's/.*"ops_per_s":\([0-9.]*\).*/\1/p'
  else
    "$build/cli/kvtier" bench --socket "$dir/$2.sock" --op "$1" --clients "$clients" \
      --blocks 16 --keys 64 --seconds "$secs" --seed "$3" --json |
      sed -n 's/.*"all":{"ops":[0-9]*,"ops_per_s":\([0-9.]*\).*/\1/p'
  fi
}
stats() {  # median min max of the numbers on stdin
  sort -g | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%s %s %s\n", m, v[1], v[NR] }'
}
sum() { awk '{ s += $1 } END { print s }'; }
# cpu_per_op load daemon: the daemon's CPU microseconds per measured op.
cpu_per_op() {
  echo "$(sum <"$dir/$1.$2.ticks") * 1000000 / $hz / $(sum <"$dir/$1.$2.ops")" | bc -l
}

# One unmeasured run of every load on each daemon: the host tier filled (its
# pages faulted in), so every measured put evicts.
for which in off on; do
  for op in "${ops[@]}"; do load "$op" "$which" 0 >/dev/null; done
done
echo "== KV events on vs off: $clients clients, 16-block prompts of 16 KiB blocks,"
echo "   $rounds rounds of ${secs} s per daemon and load"
for round in $(seq "$rounds"); do
  order=(off on)
  [ $((round % 2)) -eq 0 ] && order=(on off)
  for op in "${ops[@]}"; do
    for which in "${order[@]}"; do
      t0=$(ticks "${pid_of[$which]}")
      rate=$(load "$op" "$which" "$round")
      t1=$(ticks "${pid_of[$which]}")
      echo "$rate" >>"$dir/$op.$which"
      echo "$rate * $secs" | bc -l >>"$dir/$op.$which.ops"
      echo $((t1 - t0)) >>"$dir/$op.$which.ticks"
    done
    paste "$dir/$op.on" "$dir/$op.off" | tail -n 1 | awk '{ print $1 / $2 }' >>"$dir/$op.ratio"
  done
  echo "round $round of $rounds done" >&2
done

printf '\n%-26s %10s %10s %22s %20s\n' "load" "off ops/s" "on ops/s" "on/off [min-max]" \
  "CPU us/op off, on"
for op in "${ops[@]}"; do
  read -r off _ _ < <(stats <"$dir/$op.off")
  read -r on _ _ < <(stats <"$dir/$op.on")
  read -r ratio lo hi < <(stats <"$dir/$op.ratio")
  label=$op
  [ "$op" = lookup ] && label="lookup (no events: noise)"
  printf '%-26s %10.0f %10.0f %9.3fx [%.2f-%.2f] %9.1f, %6.1f\n' "$label" "$off" "$on" "$ratio" \
    "$lo" "$hi" "$(cpu_per_op "$op" off)" "$(cpu_per_op "$op" on)"
done
echo "(ops/s: median of the rounds; ratio: median of the rounds' on/off; CPU: the daemon's,"
echo " all threads, over all rounds, per measured op, the load's untimed setup included)"

echo
"$build/cli/kvtier" stats --socket "$dir/on.sock" | grep -i '^events' | sed 's/^/daemon: /'
if [ -n "${sub_pid:-}" ]; then
  kill "$sub_pid"
  wait "$sub_pid" 2>/dev/null || true
  read -r batches events missed cpu <"$dir/subscriber.out"
  echo "subscriber: $batches batches ($events events) received, $missed missed (seq gaps);" \
    "its CPU time ${cpu} s"
fi
