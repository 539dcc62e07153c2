# The benchmarks measure askcards at sizes far past any one agent's default quotas (thousands of
# asks a minute, thousands of parked waits): their agent is given no limits, as an operator would
# (``askcards_agent quotas NAME --pending-asks 0 …``).
NO_QUOTAS = ("--pending-asks", "0", "--pending-per-respondent", "0", "--parked-waits", "0",
             "--asks-per-minute", "0", "--ask-burst", "0")
