# Hosts made of network namespaces, for tests/net/run_net.sh and
# bench/run_net_bench.sh (sourced; bash). `net_hosts_up N` makes N hosts:
# namespaces on a bridge (in a namespace of its own), host h at
# 10.231.0.<h+1>/24 with the host name host<h> (a UTS namespace per
# process), and sets `net_flags`: mpirun's flags for one process per host
# (`net_hosts_up N K`: K per host, ranks placed host by host) over Open
# MPI's TCP transport (btl self,tcp; no shared memory between the
# hosts), started through a launch agent that runs each remote command
# inside its host's namespace (there is no ssh: --mca plm_rsh_agent).
# `net_mpirun ARGS...` runs mpirun on host 0. Everything is removed at
# exit (the namespaces and every process left in them); traffic stays on
# the namespaces' own addresses. Where the machine does not permit it,
# `net_skip` is called with the reason (the caller defines it).
net_tag="dn$$"
net_work=$(mktemp -d)
# This run's namespaces only (another run's tag may share a prefix).
net_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${net_tag}(sw|h[0-9]+)\$" || true; }
net_cleanup() {
  set +e  # (under a caller's set -e: a process that ended meanwhile must not stop the cleanup)
  local ns pid
  for ns in $(net_namespaces); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  done
  sleep 0.2
  for ns in $(net_namespaces); do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$net_work"
}
trap net_cleanup EXIT
net_addr() { echo "10.231.0.$(($1 + 1))"; }

net_hosts_up() {
  local hosts=$1 slots=${2:-1} h ns host_list=""
  [ "$(id -u)" -eq 0 ] || { net_skip "network namespaces need root (ip netns add)"; return 1; }
  command -v ip >/dev/null || { net_skip "the ip command (iproute2) is not installed"; return 1; }
  command -v unshare >/dev/null || { net_skip "unshare (util-linux) is not installed"; return 1; }
  ip netns add "${net_tag}sw" 2>/dev/null || { net_skip "this machine does not permit ip netns add"; return 1; }
  ip -n "${net_tag}sw" link add br0 type bridge 2>/dev/null || { net_skip "this machine does not permit a bridge device"; return 1; }
  ip -n "${net_tag}sw" link set br0 up || return 1
  for h in $(seq 0 $((hosts - 1))); do
    ns="${net_tag}h$h"
    ip netns add "$ns" || return 1
    # Made inside the namespaces: nothing appears in the machine's own.
    ip link add eth0 netns "$ns" type veth peer name "${net_tag}b$h" netns "${net_tag}sw" 2>/dev/null ||
      { net_skip "this machine does not permit veth pairs"; return 1; }
    ip -n "$ns" addr add "$(net_addr "$h")/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up || return 1
    ip -n "${net_tag}sw" link set "${net_tag}b$h" master br0 && ip -n "${net_tag}sw" link set "${net_tag}b$h" up || return 1
    host_list+="${host_list:+,}$(net_addr "$h"):$slots"
  done
  # The launch agent: "agent HOST command..." runs the command (a shell
  # string, as ssh would) inside HOST's namespace, under its host name.
  cat >"$net_work/agent" <<AGENT
#!/bin/sh
host="\$1"; shift
h=\${host##*.}; h=\$((h - 1))
exec ip netns exec "${net_tag}h\$h" unshare --uts sh -c "hostname host\$h; \$*"
AGENT
  chmod +x "$net_work/agent"
  net_flags=(-np "$((hosts * slots))" --host "$host_list" --mca plm_rsh_agent "$net_work/agent"
             --mca oob_tcp_if_include 10.231.0.0/24 --mca btl self,tcp --mca btl_tcp_if_include 10.231.0.0/24
             --mca pml ob1)
  local v
  for v in ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS; do [ -n "${!v:-}" ] && net_flags+=(-x "$v"); done
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

# net_mpirun MPIEXEC ARGS...: mpirun on host 0, under its host name, ended
# after NET_TIMEOUT seconds (default 600).
net_mpirun() {
  local mpiexec=$1
  shift
  ip netns exec "${net_tag}h0" unshare --uts sh -c 'hostname host0; exec "$@"' sh \
    timeout -k 10 "${NET_TIMEOUT:-600}" "$mpiexec" "${net_flags[@]}" "$@"
}
