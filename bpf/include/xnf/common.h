/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* Includes and small definitions shared by every xnf BPF program. */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

#define VLAN_VID_MASK 0x0fff

/* 802.1Q tag as it sits between the MAC addresses and the inner ethertype. */
struct vlan_hdr {
	__be16 h_vlan_TCI;
	__be16 h_vlan_encapsulated_proto;
};

/* One more than the largest XDP action (XDP_REDIRECT = 4): size of per-verdict arrays. */
#define XNF_VERDICTS 5
