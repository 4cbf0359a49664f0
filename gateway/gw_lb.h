/*
 * gateway/gw_lb.h — the gateway's load balancers (gateway/gw_lb.c): the order of one request's
 * targets, and the latency EWMA the ewma_latency and p2c balancers read. Gateway-internal, like
 * gateway/gw_impl.h.
 */
#ifndef MT_GATEWAY_GW_LB_H
#define MT_GATEWAY_GW_LB_H

#include "gateway/gw_impl.h"

/* The balancer (GW_LB_*) route `route` uses: its own lb, or the gateway's when it says default. */
int gw_lb_of_route(const gw_gateway *g, int route);

/* Fills order[0..n) (n <= GW_MAX_TARGETS) with target indices of x's route, level by level in
 * ascending level, each level ordered by the route's balancer; returns n. Draws from the
 * gateway's RNG; round_robin advances the route's counter. Locks each upstream's mutex briefly. */
int gw_lb_order(gw_exchange *x, int *order);

/* A successful attempt on upstream u took `seconds` (s) to its first token: folded into u's EWMA
 * with weight GW_EWMA_ALPHA (the first sample is taken as is). */
void gw_lb_observe(gw_gateway *g, int u, double seconds);

#endif
