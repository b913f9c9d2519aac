-- When a delivery's attempt is in flight, until when: set by the dispatcher's claim
-- (service.queries.webhooks.CLAIM), cleared by its outcome (FINISH). A retry by hand
-- while it is set would send the event twice at once, so it is refused (a 409) instead.
-- Past it, the dispatcher that claimed the delivery is taken for dead and the delivery is
-- due again, as next_attempt_at already says.
ALTER TABLE webhook_deliveries ADD COLUMN sending_until timestamptz;
