"""The multi-step UAV environment (``uav_env``: batched over environments and UAVs on any device) with its
settings, actions, disruptions and observations; the scripted planners and the episode runner (``policies``), CBBA
(``cbba``: the consensus-based allocator over the links the policies observe), its
validation against the planner (``validation``), the workloads of the RL algorithms (``experience``: replay,
``on_policy``: episodes) and its PettingZoo view (``pettingzoo_env``). It loads no checkpoint and builds no
network."""
