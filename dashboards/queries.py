"""The PromQL both the Grafana dashboards and the chaos panel's own small charts draw."""

RATE_WINDOW = "1m"


def outcome_rate(outcomes: str) -> str:
    return f'rate(eo_consumer_messages_total{{outcome=~"{outcomes}"}}[{RATE_WINDOW}])'


DELIVERIES_BY_OUTCOME = f"sum by (outcome) ({outcome_rate('applied|duplicate|retryable_failure|terminal_failure')})"
DUPLICATE_RATIO = f"sum({outcome_rate('duplicate')}) / clamp_min(sum({outcome_rate('applied|duplicate')}), 1e-9)"
OUTBOX_BACKLOG = "sum by (database) (eo_outbox_backlog)"
CONSUMER_LAG = "sum by (consumer) (eo_consumer_lag_messages)"
