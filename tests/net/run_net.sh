#!/usr/bin/env bash
# Multi-host tests without hosts: 2 or 3 hosts made of network namespaces
# (tests/net/hosts.sh), one job across them under mpirun over Open MPI's
# TCP transport, no shared memory between them; the library must decide
# the same (the workers print whether they mapped its segment).
#
# Usage: run_net.sh <mpiexec> <bin dir> <case> [hosts]
#   bin dir: where multi_worker_tests, multi_worker_fault and
#   multi_worker_lifecycle are (the build's tests/ directory).
#   cases:
#     collectives   the multi-worker test suite across the hosts (exact sums
#                   of every size class and dtype, datasets, variables,
#                   checkpoints, training steps against the in-process
#                   result), one worker per host
#     link_down     a host's link goes down mid-run: every other worker
#                   raises DeadlineExceededError or UnavailableError naming
#                   worker 1 within the 3 s collective deadline (+2 s)
#     kill_host     host 1's worker is killed (SIGKILL) mid-run
#     kill_daemon   every process of host 1 is killed, Open MPI's daemon too
#                   In both, the other workers raise UnavailableError
#                   naming worker 1 within 1 s of their next all_reduce's
#                   start (the library's own connection to worker 1 closed:
#                   src/transport/peer_watch.h), and the job ends with a
#                   non-zero status within 20 s (mpirun then ends it). At
#                   least one must; a survivor may instead be ended by Open
#                   MPI first: by mpirun, which on losing a daemon ends the
#                   workers of its own host (host 0) at once, or by Open
#                   MPI's TCP transport, when a survivor descheduled between
#                   its look at the watch and its next MPI call (3 workers
#                   on these 2 cores) finds both connections broken and MPI
#                   meets its own first (worker 0 in 1 run of 8 of
#                   kill_host with 3 hosts, 2026-12-05). An attempt in
#                   which Open MPI so ended every survivor (its own
#                   messages say so) is made again, up to 5 in all; the
#                   test fails if none shows a survivor raising.
#   The hierarchical mode (2 workers per host, placed host by host: workers
#   0 and 1 on host 0, 2 and 3 on host 1; each host's workers share its
#   segment, and only workers 0 and 2 talk across hosts):
#     hier_collectives  the multi-worker test suite across 2 or 3 hosts
#     hier_replicas the same with 2 local replicas per worker
#     hier_uneven   the same across 2 hosts with 2 workers on host 0 and 1
#                   on host 1 (a host without a segment)
#     hier_kill_member  worker 1 (on host 0, not its host's link to the
#                   others) is killed (SIGKILL) mid-run
#     hier_kill_leader  worker 2 (host 1's link to the others) is killed
#                   In both, every other worker raises UnavailableError
#                   naming the killed one within 1 s of its all_reduce's
#                   start (its host's workers see the death in the
#                   segment, the others through the process watch or the
#                   report of a worker that saw it), and the job ends with a
#                   non-zero status within 20 s.
#     hier_stuck    worker 1 stops (SIGSTOP) mid-run: every other worker
#                   raises DeadlineExceededError or UnavailableError naming
#                   worker 1 within the 3 s collective deadline (+2 s)
#     hier_stuck_hand_off  the same, with worker 1 stopping itself past its
#                   host's sum and before it joins the hand-off of its
#                   leader's result (its leader, waiting for it there, must
#                   name it before the other leaders, already in the next
#                   all_reduce, name the leader)
#     never_starts  worker 1 starts 6 s late (its program sleeps before
#                   creating the strategy): worker 0 raises
#                   DeadlineExceededError naming worker 1 by its 2 s
#                   start-up timeout (2 to 5 s)
# Exits 77 (CTest's skip) with a message where `ip netns` is not permitted.
set -u
mpiexec=$1 bin=$2 case=$3 hosts=${4:-2}
# DISTRIBUTE_REQUIRE_NET=1: a machine that cannot run these tests fails them.
skip() {
  echo "SKIPPED: $*"
  [ "${DISTRIBUTE_REQUIRE_NET:-0}" = 1 ] && { echo "FAIL: DISTRIBUTE_REQUIRE_NET=1 and the test cannot run here"; exit 1; }
  exit 77
}
fail() { echo "FAIL ($case, $hosts hosts): $*"; exit 1; }
net_skip() { skip "$@"; }
source "$(dirname "$0")/hosts.sh"
per_host=1
[[ $case == hier_* ]] && per_host=2
net_hosts_up "$hosts" "$per_host" || fail "setting up $hosts hosts"
workers=$((hosts * per_host))
victim=1  # the worker that fails
# What the workers must have set up (multi_worker_tests checks it).
if [[ $case == hier_* ]]; then
  net_flags+=(-x DISTRIBUTE_EXPECT_TRANSPORT=hierarchical)
else
  net_flags+=(-x DISTRIBUTE_EXPECT_TRANSPORT=mpi)
fi
if [ "$case" = hier_uneven ]; then
  workers=$((2 * hosts - 1))
  net_flags[1]=$workers  # (-np's value: host by host, the last host gets one worker)
fi
tag=$net_tag work=$net_work
# Runs mpirun on host 0 (under its host name), output to $work/out.
launch() {
  NET_TIMEOUT=90 net_mpirun "$mpiexec" "$@" >"$work/out" 2>&1
}
# Waits up to $1 s for $2 lines matching $3 in the output.
wait_for() {
  local end=$((SECONDS + $1))
  while [ "$SECONDS" -lt "$end" ]; do
    [ "$(grep -cE "$3" "$work/out" 2>/dev/null || true)" -ge "$2" ] 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
show() { echo "--- job output"; cat "$work/out"; echo "---"; }
# Every worker but 1 raised DeadlineExceededError or UnavailableError
# naming worker 1 within `bound` ms of its all_reduce's start; the workers
# listed after the bound may instead have been ended without a word (and
# then a survivor may name one of those, which also ended, instead).
expect_blame() {
  local bound=$1 w line ms silent="$victim"
  shift
  for w in "$@"; do
    grep -qE "^worker $w: (DEADLINE_EXCEEDED|UNAVAILABLE) after" "$work/out" || silent+="|$w"
  done
  for w in $(seq 0 $((workers - 1))); do
    [ "$w" -eq "$victim" ] && continue
    line=$(grep -E "^worker $w: (DEADLINE_EXCEEDED|UNAVAILABLE) after" "$work/out" | head -n 1)
    if [ -z "$line" ] && [[ " $* " == *" $w "* ]]; then
      echo "(worker $w was ended before it raised)"
      continue
    fi
    [ -n "$line" ] || { show; fail "worker $w did not raise DeadlineExceededError or UnavailableError"; }
    grep -qE "worker\(s\) \[($silent)\]|worker ($silent)\b" <<<"$line" ||
      { show; fail "worker $w's error does not name worker $victim (or a worker ended without a word): $line"; }
    ms=$(sed -n 's/^worker [0-9]*: [A-Z_]* after \([0-9]*\) ms.*/\1/p' <<<"$line")
    [ "$ms" -lt "$bound" ] || { show; fail "worker $w raised after $ms ms (bound $bound ms)"; }
  done
}
# Right after a kill: the job ($job) ends with a non-zero status within
# 20 s, a survivor raised UnavailableError, and every survivor raised
# naming the victim within 1 s, except the workers listed, which may have
# been ended without a word.
# With may_race set (kill_host, kill_daemon), a job in which no survivor
# raised and Open MPI's TCP transport reported the broken connection itself
# ("peer process has unexpectedly disconnected", or a failed send or
# receive of its btl_tcp), having ended the survivors, ends the attempt with
# status 3: the caller tries again.
expect_end_after_kill() {
  local start=$SECONDS status
  wait "$job"
  status=$?
  [ "$status" -ne 0 ] || { show; fail "the job ended with status 0 after the kill"; }
  [ $((SECONDS - start)) -lt 20 ] || { show; fail "the job took $((SECONDS - start)) s to end"; }
  if ! grep -qE "^worker [0-9]+: UNAVAILABLE after" "$work/out"; then
    show
    if [ -n "${may_race:-}" ] && grep -qE "peer process has unexpectedly disconnected|mca_btl_tcp_frag_(send|recv): .* failed" "$work/out"; then
      echo "(attempt $attempt: every survivor was ended by Open MPI's TCP transport before it raised)"
      exit 3
    fi
    fail "no survivor raised UnavailableError"
  fi
  expect_blame 1000 "$@"
}
expect_no_segment() {
  [ "$(grep -c 'ready (segment no)' "$work/out")" -eq "$hosts" ] || { show; fail "expected $hosts workers ready without the shared-memory segment"; }
}

case $case in
  collectives)
    launch "$bin/multi_worker_tests" --local_replicas=1 \
      --gtest_filter=-MultiWorker.TheHostsWorkersShareAMappedSegmentWithoutAName
    status=$?
    show
    [ "$status" -eq 0 ] || fail "the test suite across the hosts ended with status $status"
    ;;
  link_down)
    launch "$bin/multi_worker_fault" loop &
    job=$!
    wait_for 60 "$hosts" ": ready " || { show; fail "the workers did not start"; }
    expect_no_segment
    sleep 1
    ip -n "${tag}h1" link set eth0 down || fail "link down"
    wait_for 20 $((hosts - 1)) ": (DEADLINE_EXCEEDED|UNAVAILABLE) after" || { show; fail "the other workers did not raise within 20 s"; }
    expect_blame 5000
    show
    kill "$job" 2>/dev/null
    ;;
  kill_host|kill_daemon)
    # kill_host: the worker only, not the daemon nor the launch agent's
    # shell; kill_daemon: all of them at once (one kill(1), as a host's
    # crash would: a worker that outlives its daemon by more than a few
    # microseconds is ended by Open MPI itself, which closes its MPI
    # connections before the process watch's, and a survivor may then be
    # ended by Open MPI before it can raise).
    # At least one survivor raised; any that did named worker 1; the others
    # were ended by Open MPI first (see the cases above). When Open MPI
    # ended every survivor first (each looked at the watch just before the
    # kill, then met the broken MPI connection in its next MPI call; a
    # worker descheduled between the two, as beside a busy process, opens
    # that window wide), the attempt shows nothing of the library: it is
    # made again, up to 5 times in all (beside a busy process, 4 of 22
    # attempts with 2 hosts went so, 2026-12-07: Open MPI noticed the hang-up
    # first, in its send or its receive).
    may_race=1
    for attempt in 1 2 3 4 5; do
      # Another attempt only while it fits in CTest's 150 s (one that works
      # takes 5-10 s).
      [ "$attempt" -eq 1 ] || [ "$SECONDS" -lt 90 ] || break
      tried=$attempt
      (
        : >"$work/out"  # not the last attempt's lines
        launch "$bin/multi_worker_fault" loop &
        job=$!
        wait_for 60 "$hosts" ": ready " || { show; fail "the workers did not start"; }
        expect_no_segment
        sleep 1
        victims=()
        for pid in $(ip netns pids "${tag}h1"); do
          case $case:$(cat "/proc/$pid/comm" 2>/dev/null) in kill_daemon:*|kill_host:multi_worker*) victims+=("$pid") ;; esac
        done
        [ "${#victims[@]}" -gt 0 ] || { show; fail "no process of host 1 to kill"; }
        kill -9 "${victims[@]}"
        expect_end_after_kill $(seq 0 $((hosts - 1)))
        show
      )
      status=$?
      [ "$status" -eq 3 ] || break
    done
    [ "$status" -eq 0 ] || { [ "$status" -eq 3 ] && fail "no survivor raised UnavailableError in $tried attempts (each showed Open MPI's own report of the broken connection, which a library that never raises would show too)"; exit "$status"; }
    ;;
  hier_collectives|hier_replicas|hier_uneven)
    replicas=1
    [ "$case" = hier_replicas ] && replicas=2
    launch "$bin/multi_worker_tests" --local_replicas=$replicas --gtest_color=no --gtest_filter=-MultiWorker.MismatchedShapes*
    status=$?
    show
    [ "$status" -eq 0 ] || fail "the test suite across the hosts ended with status $status"
    [ "$(grep -c 'PASSED' "$work/out")" -eq "$workers" ] || fail "expected $workers workers to pass"
    # A mismatch breaks the channel across hosts: the job then ends with a
    # non-zero status (every worker aborts instead of finalizing), after
    # every worker passed the test.
    launch "$bin/multi_worker_tests" --local_replicas=$replicas --gtest_color=no --gtest_filter=MultiWorker.MismatchedShapes*
    status=$?
    show
    [ "$status" -ne 0 ] || fail "expected the job to end with a non-zero status after the mismatch broke the channel"
    [ "$(grep -c 'PASSED  \] 1 test\.' "$work/out")" -eq "$workers" ] || fail "expected $workers workers to pass the mismatch test"
    ;;
  hier_kill_member|hier_kill_leader|hier_stuck|hier_stuck_hand_off)
    [ "$case" = hier_kill_leader ] && victim=2
    mode=()
    [ "$case" = hier_stuck_hand_off ] && mode=(stop_before_hand_off)
    launch "$bin/multi_worker_fault" loop "${mode[@]}" &
    job=$!
    wait_for 60 "$workers" ": ready " || { show; fail "the workers did not start"; }
    # Every host's workers share its segment.
    [ "$(grep -c 'ready (segment yes)' "$work/out")" -eq "$workers" ] || { show; fail "expected every worker to map its host's segment"; }
    sleep 1
    pid=$(sed -n "s/^worker $victim: ready (segment yes) pid \([0-9]*\)\$/\1/p" "$work/out")
    [ -n "$pid" ] || { show; fail "no pid of worker $victim"; }
    if [ "$case" = hier_stuck ] || [ "$case" = hier_stuck_hand_off ]; then
      # (hier_stuck_hand_off: worker 1 stops itself in its 200th all_reduce.)
      [ "$case" = hier_stuck ] && kill -STOP "$pid"
      wait_for 20 $((workers - 1)) ": (DEADLINE_EXCEEDED|UNAVAILABLE) after" ||
        { show; fail "the other workers did not raise within 20 s"; }
      expect_blame 5000
      show
      kill -9 "$pid" "$job" 2>/dev/null
      echo "PASS ($case, $hosts hosts)"
      exit 0
    fi
    kill -9 "$pid"
    # The victim's host-mate sees the death in the segment (a pidfd, no
    # Open MPI involved): it must raise; the others may be ended by Open MPI
    # first (see kill_host).
    mate=$((victim ^ 1))
    expect_end_after_kill $(seq 0 $((workers - 1)) | grep -vx "$mate")
    show
    ;;
  never_starts)
    launch "$bin/multi_worker_lifecycle" late_hello
    show
    grep -q "worker 0: PASS late_hello" "$work/out" || fail "worker 0 did not raise DeadlineExceededError naming worker 1 in 2 to 5 s"
    ;;
  *) fail "unknown case" ;;
esac
echo "PASS ($case, $hosts hosts)"
