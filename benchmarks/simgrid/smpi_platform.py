"""SimGrid platform (XML) and hostfile for the SMPI SIMULATION of zccl's collectives.

Run: ``python benchmarks/simgrid/smpi_platform.py --hosts 16 --gbps 10 --out /tmp/plat`` writes
``/tmp/plat/cluster-16-10g.xml`` and ``/tmp/plat/hosts-16.txt`` (``run_smpi.py`` calls
:func:`write_platform` itself). Not named ``platform.py``: a script in this directory would then
import it instead of Python's own ``platform`` module.

The simulated machine is one ``<cluster>``: N hosts, each with its own full-duplex link to one
switch, the layout of a cluster on a single non-blocking switch:

* **Hosts.** ``speed`` is ``HOST_SPEED`` (1 Gflop/s), the same value that run_smpi.py passes as
  ``--cfg=smpi/host-speed``. SMPI measures the real CPU time of the code between two MPI calls
  (``smpi/simulate-computation``, on by default), converts it to flops at ``smpi/host-speed`` and
  runs those flops on the simulated host: equal speeds make one second of real CPU one simulated
  second. One core per host (one MPI rank per host).
* **Host links.** ``sharing_policy="SPLITDUPLEX"``: separate up and down links, so a host can send
  and receive at full rate at once (like a switched Ethernet/InfiniBand port; the ring
  algorithms rely on it). Bandwidth is the nominal line rate; run_smpi.py sets SMPI's correction
  factors to ``smpi/bw-factor`` 0.94 (TCP/IP framing) and ``smpi/lat-factor`` 1 (SMPI's defaults
  were fitted to one Gigabit-Ethernet cluster).
* **Latency.** A route crosses two host links (sender up, receiver down) and the backbone, so the
  one-way host-to-host latency is ``2 * link_latency + backbone latency`` (backbone: 0). Chosen
  one-way latencies (``LATENCY_US``): 5 us at 10 and 100 Gbit/s (a cut-through switch plus a
  kernel-bypass or tuned TCP stack); 25 us at 1 Gbit/s, close to the veth/TCP stack latency of
  the network-namespace emulation (benchmarks/cluster/cluster.sh, which has no netem delay), so
  p = 4 at 1 Gbit/s can be compared with it.
* **Switch / backbone.** ``bb_sharing_policy="FATPIPE"``: every flow through the backbone gets up
  to ``bb_bw`` without sharing it with other flows, i.e. a non-blocking crossbar. ``bb_bw`` is the
  host link rate, so it never limits a flow more than the host links already do. Contention is
  therefore modelled only on the host links (several flows into or out of one host share it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

HOST_SPEED = "1Gf"  # must equal run_smpi.py's --cfg=smpi/host-speed
LATENCY_US = {1: 25.0, 10: 5.0, 100: 5.0}  # one-way host-to-host latency per link speed (Gbit/s)

_TEMPLATE = """<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<!-- SIMULATION platform for zccl-torch (benchmarks/simgrid/smpi_platform.py): {hosts} hosts at
     {gbps:g} Gbit/s full duplex, one non-blocking switch, {lat:g} us one-way latency. -->
<platform version="4.1">
  <cluster id="cluster" prefix="node-" suffix="" radical="0-{last}" speed="{speed}"
           bw="{gbps:g}Gbps" lat="{link_lat:g}us" sharing_policy="SPLITDUPLEX"
           bb_bw="{gbps:g}Gbps" bb_lat="0us" bb_sharing_policy="FATPIPE"/>
</platform>
"""


def latency_us(gbps: float) -> float:
    """One-way host-to-host latency (microseconds) used for a link speed."""
    return LATENCY_US.get(int(gbps), 5.0)


def platform_xml(hosts: int, gbps: float) -> str:
    """The platform XML text for ``hosts`` hosts with ``gbps`` Gbit/s links."""
    if hosts < 1:
        raise ValueError("need at least one host")
    lat = latency_us(gbps)
    return _TEMPLATE.format(
        hosts=hosts, gbps=gbps, lat=lat, last=hosts - 1, speed=HOST_SPEED, link_lat=lat / 2
    )


def hostfile_text(hosts: int) -> str:
    """One host name per line: rank r runs on node-r."""
    return "".join(f"node-{i}\n" for i in range(hosts))


def write_platform(hosts: int, gbps: float, out_dir: Path) -> tuple[Path, Path]:
    """Writes the platform XML and the hostfile into ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    xml = out_dir / f"cluster-{hosts}-{gbps:g}g.xml"
    hostfile = out_dir / f"hosts-{hosts}.txt"
    xml.write_text(platform_xml(hosts, gbps))
    hostfile.write_text(hostfile_text(hosts))
    return xml, hostfile


def main() -> None:
    """Command line: write one platform and hostfile."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--gbps", type=float, default=10.0, help="link speed in Gbit/s")
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    xml, hostfile = write_platform(args.hosts, args.gbps, args.out)
    print(f"{xml}\n{hostfile}")


if __name__ == "__main__":
    main()
