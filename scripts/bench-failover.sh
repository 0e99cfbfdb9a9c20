#!/usr/bin/env bash
# bench-failover.sh -- how long a replicated keyring goes without an elected
# rotator after the elected one is killed, and whether two processes ever
# believed they were elected at once (issue 56).
#
#   scripts/bench-failover.sh                    # 20 kills, the defaults
#   ROUNDS=5 LEASE_TTL=5s KEEP_ALIVE=1s scripts/bench-failover.sh
#
# Starts a 3-member etcd cluster on loopback and three `wid serve --rotator`
# candidates (release build, one per member, --log-format json), then ROUNDS
# times: finds the elected candidate from the audit trail, SIGKILLs it, waits
# for another candidate's `elected` line and starts the killed one again.
# Prints p50, p99 and the longest time from the kill to the next election
# (the kill's reading of this machine's clock to the winner's audit stamp:
# one clock), and the moments two processes believed they were elected: each
# belief runs from a process's `elected` line to its `lost` or `resigned`
# line, or to its kill. Elections must also follow each other in the order
# of the etcd revisions that created the election key. Exits 1 on a split
# brain or a kill no candidate took over from within 30 s.
#
# Needs etcd (Debian's etcd-server; installed when missing, as root) and
# python3 (the trail's analysis).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib.sh
source scripts/lib.sh

ROUNDS=${ROUNDS:-20}
LEASE_TTL=${LEASE_TTL:-3s}
KEEP_ALIVE=${KEEP_ALIVE:-500ms}
# How long a restarted candidate gets to join before the next kill.
SETTLE=${SETTLE:-2}

command -v etcd >/dev/null 2>&1 || wid_apt_install etcd-server
cargo build --release --locked --quiet -p wid
wid="$(wid_target_dir)/release/wid"

work=$(mktemp -d)
etcd_pids=()
wid_pids=(0 0 0)
cleanup() {
    for pid in "${wid_pids[@]}" "${etcd_pids[@]}"; do
        [ "$pid" != 0 ] && kill -9 "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

now_ms() {
    local t=$EPOCHREALTIME
    echo $(( ${t%.*} * 1000 + 10#${t#*.} / 1000 ))
}

# The cluster.
clients=() peers=() initial=""
for i in 0 1 2; do
    clients+=("$(wid_free_port)")
    peers+=("$(wid_free_port)")
    initial+="${initial:+,}m$i=http://127.0.0.1:${peers[$i]}"
done
for i in 0 1 2; do
    etcd --name "m$i" --data-dir "$work/m$i" \
        --listen-client-urls "http://127.0.0.1:${clients[$i]}" \
        --advertise-client-urls "http://127.0.0.1:${clients[$i]}" \
        --listen-peer-urls "http://127.0.0.1:${peers[$i]}" \
        --initial-advertise-peer-urls "http://127.0.0.1:${peers[$i]}" \
        --initial-cluster "$initial" --initial-cluster-state new \
        --initial-cluster-token bench-failover >"$work/etcd$i.log" 2>&1 &
    etcd_pids+=($!)
done
# Member i's URL first: each candidate talks to its own member.
urls_of() {
    local i=$1 k out=""
    for k in 0 1 2; do
        out+="${out:+,}http://127.0.0.1:${clients[$(( (i + k) % 3 ))]}"
    done
    echo "$out"
}
"$wid" keyring generate-kek --kek-file "$work/kek" >/dev/null
flags() {
    echo --etcd "$(urls_of "$1")" --etcd-allow-plain-http --etcd-prefix /bench-failover/ --kek-file "$work/kek"
}
deadline=$((SECONDS + 60))
# shellcheck disable=SC2046
until "$wid" keyring init $(flags 0) --alg EdDSA >/dev/null 2>"$work/init.err"; do
    if [ $SECONDS -ge $deadline ]; then
        echo "bench-failover: the etcd cluster did not take the keyring within 60 s: $(cat "$work/init.err")" >&2
        exit 1
    fi
    sleep 0.5
done

# The candidates: one log file per process lifetime (trail.<n>), and its
# end (killed at <ms>) in trail.<n>.end.
lives=0
start_candidate() {
    local i=$1
    lives=$((lives + 1))
    # shellcheck disable=SC2046
    "$wid" --log-format json serve $(flags "$i") --listen 127.0.0.1:0 --rotator \
        --rotator-lease-ttl "$LEASE_TTL" --rotator-keep-alive "$KEEP_ALIVE" \
        >/dev/null 2>"$work/trail.$lives" &
    wid_pids[i]=$!
    # Killed on purpose: no job notice.
    disown "${wid_pids[$i]}"
    echo "$lives" >"$work/life.$i"
}
for i in 0 1 2; do start_candidate "$i"; done

# The candidate (0..2) elected now: the one whose process's last election
# line in its trail says elected.
elected() {
    local i
    for i in 0 1 2; do
        [ "${wid_pids[$i]}" = 0 ] && continue
        if grep '"event":"election"' "$work/trail.$(cat "$work/life.$i")" 2>/dev/null |
            tail -n 1 | grep -q '"to":"elected"'; then
            echo "$i"
            return 0
        fi
    done
    return 1
}

wait_elected() {
    local limit=$((SECONDS + 30)) who
    until who=$(elected); do
        if [ $SECONDS -ge $limit ]; then
            echo "bench-failover: no candidate was elected within 30 s" >&2
            tail -n 5 "$work"/trail.* >&2
            exit 1
        fi
        sleep 0.02
    done
    echo "$who"
}

echo "bench-failover: $ROUNDS kills of the elected rotator; lease TTL $LEASE_TTL, keep-alive $KEEP_ALIVE; a 3-member etcd"
for round in $(seq 1 "$ROUNDS"); do
    leader=$(wait_elected)
    life=$(cat "$work/life.$leader")
    kill -9 "${wid_pids[$leader]}"
    killed_at=$(now_ms)
    echo "$killed_at" >"$work/trail.$life.end"
    echo "$killed_at" >>"$work/kills"
    wid_pids[leader]=0
    next=$(wait_elected)
    start_candidate "$leader"
    echo "  round $round: killed candidate $leader, candidate $next elected"
    sleep "$SETTLE"
done
ended_at=$(now_ms)

python3 - "$work" "$ended_at" <<'PY'
import datetime, glob, json, os, sys

work, ended = sys.argv[1], int(sys.argv[2])

def ms(stamp):
    t = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ")
    return int(t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000)

beliefs, elections = [], []
for path in sorted(glob.glob(os.path.join(work, "trail.*"))):
    if path.endswith(".end"):
        continue
    end = ended
    if os.path.exists(path + ".end"):
        end = int(open(path + ".end").read())
    start = None
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") != "election":
            continue
        at = ms(e["time"])
        if e["to"] == "elected":
            start = at
            elections.append((at, int(e.get("revision", 0)), path))
        elif start is not None:
            beliefs.append((start, at, path))
            start = None
    if start is not None:
        beliefs.append((start, end, path))

overlaps = 0
for i, (s1, e1, p1) in enumerate(beliefs):
    for s2, e2, p2 in beliefs[i + 1:]:
        if p1 != p2 and s1 < e2 and s2 < e1:
            overlaps += 1
            print(f"  split brain: {p1} [{s1}, {e1}) and {p2} [{s2}, {e2})")
elections.sort()
revisions = [r for _, r, _ in elections]
in_order = all(a < b for a, b in zip(revisions, revisions[1:])) and all(r > 0 for r in revisions)

kills = [int(x) for x in open(os.path.join(work, "kills")).read().split()]
gaps = []
for k in kills:
    after = [at for at, _, _ in elections if at >= k]
    if not after:
        print(f"  no election after the kill at {k}")
        sys.exit(1)
    gaps.append((min(after) - k) / 1000)
gaps.sort()

def rank(p):
    return gaps[max(0, -(-len(gaps) * p // 100) - 1)]

print(f"failover: {len(gaps)} kills: p50 {rank(50):.2f} s, p99 {rank(99):.2f} s, longest {gaps[-1]:.2f} s, shortest {gaps[0]:.2f} s")
print(f"split brain: {overlaps} moments two processes believed they were elected ({len(beliefs)} beliefs, {len(elections)} elections)")
print(f"elections in etcd revision order: {'yes' if in_order else 'NO'} ({revisions[0]}..{revisions[-1]})")
sys.exit(0 if overlaps == 0 and in_order else 1)
PY
