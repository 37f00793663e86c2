"""The gateway slice's own metrics: node listeners that could not be opened, the
routes served, moved and refused; defined on the proxy's registry by
`Metrics.of(GatewayMetrics)`."""

from __future__ import annotations

from proxy.metrics import Metrics


class GatewayMetrics:
    def __init__(self, metrics: Metrics) -> None:
        self.listener_errors = metrics.counter(
            "kafkalens_gateway_listener_errors_total",
            "Gateway mode: node listeners that could not be opened: port_in_use,"
            " bind_failed, too_many_nodes (gateway.max_nodes; their clients fail),"
            " port_conflict (the port is another route's), no_port (the node id maps past"
            " 65535).",
            ("reason",),
        )
        self.routes = metrics.gauge(
            "kafkalens_gateway_routes",
            "Gateway mode: nodes served, by kind of endpoint (broker, controller).",
            ("kind",),
            mode="max",
        )
        self.routes_moved = metrics.counter(
            "kafkalens_gateway_routes_moved_total",
            "Gateway mode: routes that moved to a node's new address, as the cluster said"
            " (Metadata, DescribeCluster, DescribeQuorum) and a check confirmed.",
            ("kind",),
        )
        self.routes_refused = metrics.counter(
            "kafkalens_gateway_routes_refused_total",
            "Gateway mode: routes not opened or not moved because the address failed its"
            " check: wrong_kind (not a broker's listener for a broker route, not a"
            " controller's for a controller route), unreachable (no answer to a move).",
            ("kind", "reason"),
        )
        for kind in ("broker", "controller"):
            self.routes.labels(kind=kind)
            self.routes_moved.labels(kind=kind)
            for reason in ("wrong_kind", "unreachable"):
                self.routes_refused.labels(kind=kind, reason=reason)

    def listener_error(self, reason: str) -> None:
        """`reason`: port_in_use, bind_failed, too_many_nodes, port_conflict or no_port
        (the node id maps past 65535)."""
        self.listener_errors.labels(reason=reason).inc()

    def route_moved(self, kind: str) -> None:
        """`kind`: broker or controller."""
        self.routes_moved.labels(kind=kind).inc()

    def route_refused(self, kind: str, reason: str) -> None:
        """`kind`: broker or controller; `reason`: wrong_kind or unreachable."""
        self.routes_refused.labels(kind=kind, reason=reason).inc()
