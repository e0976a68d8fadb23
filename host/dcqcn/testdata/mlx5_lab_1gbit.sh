#!/bin/sh
# DCQCN profile lab at line rate 1gbit as NVIDIA ConnectX (mlx5) settings:
# MLNX_OFED's mlnx_qos and /sys/class/net/eth0/ecn (root). Rates are the
# profile's at that line rate: for a NIC of another speed, give its speed.
# RoCE data: DSCP 26, priority 3. CNPs: DSCP 48, priority 6.
set -e
mlnx_qos -i eth0 --trust dscp
mlnx_qos -i eth0 --dscp2prio set,26,3
mlnx_qos -i eth0 --dscp2prio set,48,6
# A lossless fabric (the switch's PFC no-drop class) also wants:
#   mlnx_qos -i eth0 --pfc 0,0,0,1,0,0,0,0
# NP (receiver): a CNP for CE-marked RoCE packets of priority 3
echo 1 > /sys/class/net/eth0/ecn/roce_np/enable/3
echo 6 > /sys/class/net/eth0/ecn/roce_np/cnp_802p_prio  # 802.1p priority
echo 48 > /sys/class/net/eth0/ecn/roce_np/cnp_dscp  # DSCP
echo 1000 > /sys/class/net/eth0/ecn/roce_np/min_time_between_cnps  # µs
# RP (sender): DCQCN on priority 3
echo 1 > /sys/class/net/eth0/ecn/roce_rp/enable/3
echo 0 > /sys/class/net/eth0/ecn/roce_rp/clamp_tgt_rate  # 0 or 1
echo 1 > /sys/class/net/eth0/ecn/roce_rp/clamp_tgt_rate_after_time_inc  # 0 or 1
echo 1020 > /sys/class/net/eth0/ecn/roce_rp/dce_tcp_g  # of 1024
echo 2200 > /sys/class/net/eth0/ecn/roce_rp/dce_tcp_rtt  # µs
echo 1023 > /sys/class/net/eth0/ecn/roce_rp/initial_alpha_value  # of 1024; 1024 (α = 1.0) in the profile, the firmware's largest is 1023
echo 0 > /sys/class/net/eth0/ecn/roce_rp/rate_reduce_monitor_period  # µs; 0: every CNP cuts
echo 0 > /sys/class/net/eth0/ecn/roce_rp/rate_to_set_on_first_cnp  # Mbit/s; 0: keep the current rate
echo 1 > /sys/class/net/eth0/ecn/roce_rp/rpg_ai_rate  # Mbit/s
echo 10000000 > /sys/class/net/eth0/ecn/roce_rp/rpg_byte_reset  # bytes; 0 = off
echo 11 > /sys/class/net/eth0/ecn/roce_rp/rpg_gd  # log2 divisor of α·1024
echo 5 > /sys/class/net/eth0/ecn/roce_rp/rpg_hai_rate  # Mbit/s
echo 0 > /sys/class/net/eth0/ecn/roce_rp/rpg_max_rate  # Mbit/s; 0: the port's speed
echo 0 > /sys/class/net/eth0/ecn/roce_rp/rpg_min_dec_fac  # percent
echo 3 > /sys/class/net/eth0/ecn/roce_rp/rpg_min_rate  # Mbit/s; 2.5 Mbit/s in the profile, sysfs takes whole Mbit/s
echo 5 > /sys/class/net/eth0/ecn/roce_rp/rpg_threshold  # stages
echo 2200 > /sys/class/net/eth0/ecn/roce_rp/rpg_time_reset  # µs
# Not NIC settings: where implementations differ, this profile takes
#   alpha_rule after_cut (the firmware's: per_period)
#   alpha_timer_restart 1 (the firmware's: 0)
#   clamp_rt_at_max_rate 0 (the firmware's: 1)
#   increase_rule paper (the firmware's)
#   rate_validation 75 (the firmware's: 0)
#   reduce_timing leading_edge (the firmware's: deferred)
