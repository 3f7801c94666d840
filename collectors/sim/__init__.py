"""The physics-grounded supernode simulator: fabricwatch's only source of synthetic telemetry.

``Simulator(topology, faults, seed=..., pathologies=...)`` produces all five telemetry kinds of DESIGN
§3 for any topology, one scrape per :meth:`Simulator.step`, much faster than real time and
byte-for-byte deterministic from its seed. Without pathologies it is the tidy world (every column,
every scrape) the unit tests use. The physics are split by subject, each module documenting its numbers
and their sources:

* ``job``       the training job's compute / all-reduce phases;
* ``thermal``   GPU power, temperature, throttling, and the NPO engines' heat path;
* ``optics``    400G-DR4 optical powers, laser bias, BER waterfall, RS(544,514) FEC, module parts;
* ``fabric``    traffic per link, queues, ECN marks and PFC pause propagation;
* ``injection`` the 13 fault causes of DESIGN §4 and their exact signatures, with their variants
  (low-rate corruption, an intermittent connector, a switch reboot, an all-reduce incast, PFC per
  priority);
* ``realism``   the pathologies of DESIGN §4b that live in the plant (DOM offsets, mixed vendors, load
  steps, bursty traffic, coolant drift, module swaps, maintenance, error bursts);
* ``delivery``  the pathologies of the collectors (clock skew, lost and late scrapes, outages, cadence,
  agent restarts, saturation, duplicates, spare ports) and the ``profiles`` of real collectors;
* ``simulator`` state between scrapes, link states and counter resets; ``messages`` the cutting into
  messages; ``streams`` the random streams that make faulted and healthy runs exactly comparable.

``simulate_capture`` writes a capture file (DESIGN §6); ``source.SimSource`` serves live scrapes.
"""

from fabricwatch.collectors.sim.capture import simulate_capture
from fabricwatch.collectors.sim.simulator import DEFAULT_START_TS, Simulator

__all__ = ["DEFAULT_START_TS", "Simulator", "simulate_capture"]
