#!/usr/bin/env bash
# The remote tier against raw Redis, in one run on this machine: starts a
# 3-master Redis Cluster on loopback (Debian's redis-server, no persistence,
# no replicas, data in a temporary directory), runs bench_remote against it
# and tears the cluster down at exit, however the script ends.
#
# bench_remote measures, for 256 KiB and 2 MiB blocks, RemoteStore::Write
# (1 and 4 threads, one block per call) and RemoteStore::ReadLeading (1 and
# 16 blocks per call) in MB/s beside raw SET/GET of the same keys, straight
# through hiredis to each key's master and through our own RedisCluster
# client, in alternating rounds; it prints the median ratio ours/peer.
# Goal: >= 0.8x raw Redis.
#
# SEAL=1 adds the store with block keys (every value sealed, AES-256-GCM)
# and TLS=1 the store over TLS (the nodes listen on a TLS port too, with
# certificates made here by `openssl`), each against ours in the clear in
# the same rounds: the cost of encryption (goal >= 0.9x). With TLS=1 the
# limit is measured too: Redis' own client (redis-benchmark, one
# connection, one more node, standalone) over TLS against plain, GET of the
# same sizes, alternating, so that what TLS costs the server and the
# loopback is known apart from what it costs us.
#
# Usage: bench/remote_vs_redis.sh [build-dir]   (default build-release; a
# Release build with -DKVTIER_BUILD_BENCH=ON)
# ROUNDS (default 7), SLICE_MIB (payload per leg, default 128) and SET_MIB
# (distinct payload per key set, default 64) trade time for stability.
# ~1 minute; the cluster holds ~260 MiB at most.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-release}
rounds=${ROUNDS:-7}
slice=${SLICE_MIB:-128}
set_mib=${SET_MIB:-64}
for tool in redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "$tool missing: scripts/install-deps.sh" >&2; exit 1; }
done
cmake --build "$build" --target bench_remote >/dev/null

dir=$(mktemp -d /tmp/kvtier-remote-bench-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

# Three free ports whose cluster bus ports (+10000) are free too.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ports=()
candidate=$((20000 + RANDOM % 20000))
while [ "${#ports[@]}" -lt 3 ]; do
  candidate=$((candidate + 1))
  port_free "$candidate" && port_free $((candidate + 10000)) && port_free $((candidate + 1000)) &&
    ports+=("$candidate")
done

# With TLS=1: a CA and one certificate for 127.0.0.1 (the nodes' and ours).
tls_args=()
if [ "${TLS:-0}" = 1 ]; then
  command -v openssl >/dev/null || { echo "openssl missing: scripts/install-deps.sh" >&2; exit 1; }
  printf '[req]\ndistinguished_name=dn\n[dn]\n[ext]\nsubjectAltName=IP:127.0.0.1\n' >"$dir/tls.cnf"
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  openssl req -x509 "${ec[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 -subj /CN=bench-ca \
    2>/dev/null
  openssl req "${ec[@]}" -keyout "$dir/node.key" -out "$dir/node.csr" -subj /CN=node \
    -config "$dir/tls.cnf" 2>/dev/null
  openssl x509 -req -in "$dir/node.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -out "$dir/node.pem" -days 2 -extfile "$dir/tls.cnf" -extensions ext 2>/dev/null
  tls_files=(--tls-cert-file "$dir/node.pem" --tls-key-file "$dir/node.key"
    --tls-ca-cert-file "$dir/ca.pem")
fi
for p in "${ports[@]}"; do
  if [ "${TLS:-0}" = 1 ]; then
    # The TLS port beside the plain one; CLUSTER SLOTS names the ports of
    # the asker's kind.
    tls_args=(--tls-port $((p + 1000)) "${tls_files[@]}" --tls-cluster yes)
  fi
  redis-server --port "$p" --bind 127.0.0.1 --protected-mode no --dir "$dir" \
    --save "" --appendonly no --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
    "${tls_args[@]}" --daemonize no --logfile "$dir/node-$p.log" &
  pids+=($!)
done
for p in "${ports[@]}"; do
  for _ in $(seq 100); do
    [[ $(redis-cli -p "$p" PING 2>/dev/null) == PONG ]] && break
    sleep 0.05
  done
done
addrs=("${ports[@]/#/127.0.0.1:}")
seeds=$(IFS=,; echo "${addrs[*]}")
create=("${addrs[@]}")
cli_tls=()
if [ "${TLS:-0}" = 1 ]; then
  # Created through the TLS ports, so the bus learns them (tls-cluster).
  create=()
  for p in "${ports[@]}"; do create+=("127.0.0.1:$((p + 1000))"); done
  cli_tls=(--tls --cacert "$dir/ca.pem" --cert "$dir/node.pem" --key "$dir/node.key")
fi
redis-cli "${cli_tls[@]}" --cluster create "${create[@]}" --cluster-replicas 0 --cluster-yes \
  >"$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; exit 1; }
for _ in $(seq 100); do
  ok=0
  for p in "${ports[@]}"; do
    [[ $(redis-cli -p "$p" CLUSTER INFO) == *cluster_state:ok* ]] && ok=$((ok + 1))
  done
  [ "$ok" -eq 3 ] && break
  sleep 0.1
done
if [ "$ok" -ne 3 ]; then
  echo "the cluster did not come up:" >&2
  tail -n 5 "$dir"/node-*.log >&2
  exit 1
fi

echo "== remote tier vs raw Redis: 3-master cluster on $seeds ($(redis-server --version | cut -d' ' -f1-3))"
extra=()
[ "${SEAL:-0}" = 1 ] && extra+=(--seal)
if [ "${TLS:-0}" = 1 ]; then
  tls_seeds=$(IFS=,; echo "${create[*]}")
  extra+=(--tls-seeds "$tls_seeds" --tls-ca "$dir/ca.pem" --tls-cert "$dir/node.pem"
    --tls-key "$dir/node.key")
fi
"$build/bench/bench_remote" --seeds "$seeds" --rounds "$rounds" --slice-mib "$slice" \
  --set-mib "$set_mib" "${extra[@]}"

if [ "${TLS:-0}" = 1 ]; then
  # The limit's node: one more redis-server, standalone (redis-benchmark's
  # cluster mode adds its own routing), listening plain and over TLS.
  lim=$((ports[2] + 1))
  until port_free "$lim" && port_free $((lim + 1000)); do lim=$((lim + 1)); done
  redis-server --port "$lim" --bind 127.0.0.1 --protected-mode no --dir "$dir" --save "" \
    --appendonly no --tls-port $((lim + 1000)) "${tls_files[@]}" --daemonize no \
    --logfile "$dir/node-limit.log" &
  pids+=($!)
  for _ in $(seq 100); do
    [[ $(redis-cli -p "$lim" PING 2>/dev/null) == PONG ]] && break
    sleep 0.05
  done
  # One rate (requests/s) of redis-benchmark: test $1, value bytes $2,
  # requests $3, then its connection arguments.
  rate() {
    local t=$1 size=$2 n=$3
    shift 3
    redis-benchmark -c 1 -n "$n" -d "$size" -t "$t" --csv "$@" 2>/dev/null |
      awk -F'"' -v t="${t^^}" '$2 == t {print $4; exit}'
  }
  med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
  echo
  echo "== the limit: redis-benchmark (Redis' own client, 1 connection) over TLS / plain, one node"
  printf '%-6s %-6s %12s %12s %8s %8s\n' op size "plain req/s" "tls req/s" median worst
  for size in 262144 2097152; do
    n=$((slice * 1048576 / size))
    [ "$n" -ge 256 ] || n=256
    # The value GET reads, written once (redis-benchmark's own SET over
    # TLS is no limit: with values this large it ran at 0.01-0.1x of its
    # plain SET here, its client stalling, while ours wrote at 0.6x).
    rate set "$size" 1 -h 127.0.0.1 -p "$lim" >/dev/null
    for t in get; do
      ratios=() plains=() tlss=()
      for r in $(seq "$rounds"); do
        for leg in $([ $((r % 2)) = 1 ] && echo "plain tls" || echo "tls plain"); do
          if [ "$leg" = plain ]; then
            plains+=("$(rate "$t" "$size" "$n" -h 127.0.0.1 -p "$lim")")
          else
            tlss+=("$(rate "$t" "$size" "$n" -h 127.0.0.1 -p $((lim + 1000)) --tls \
              --cacert "$dir/ca.pem" --cert "$dir/node.pem" --key "$dir/node.key")")
          fi
        done
        ratios+=("$(echo "${tlss[-1]} / ${plains[-1]}" | bc -l)")
      done
      printf '%-6s %-6s %12.0f %12.0f %7.2fx %7.2fx\n' "$t" "$([ "$size" = 262144 ] && echo 256k || echo 2M)" \
        "$(med "${plains[@]}")" "$(med "${tlss[@]}")" "$(med "${ratios[@]}")" \
        "$(printf '%s\n' "${ratios[@]}" | sort -g | head -1)"
    done
  done
fi
