"""`python -m loyalty_points`: the consumer, configured by the runtime's environment variables
(DATABASE_URL, KAFKA_BOOTSTRAP_SERVERS, CONTROL_PORT, ...)."""

from effectively_once.consumer import wiring
from loyalty_points.handlers import HANDLERS

if __name__ == "__main__":
    wiring.run("loyalty-points-v1", ("loyalty.orders",), HANDLERS)
