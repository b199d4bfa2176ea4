package delayqueue

import "errors"

var (
	// ErrInvalid is wrapped by every error about a bad argument: an empty
	// queue name, a negative delay, a payload over the queue's limit, a
	// claim of zero jobs. Such calls never reach Redis.
	ErrInvalid = errors.New("delayqueue: invalid argument")

	// ErrLeaseLost is returned by Ack, Nack, Bury, Release and Extend when the
	// delivery no longer holds its job: its lease ran out and another
	// claim requeued it (and perhaps handed it to another consumer, who may
	// have finished it); or this delivery already finished the job, and the
	// call cannot tell that it is that same finish (it is of another kind,
	// an Ack after a Nack say, or the job has moved on since: claimed
	// again, revived, dropped from the dead letters, or, for an Ack, the
	// lease could have ended meanwhile). The call changed nothing; if
	// go-redis resent it after a lost reply, its first run may have
	// (Delivery.Ack and Delivery.Nack say when a resent call can tell).
	ErrLeaseLost = errors.New("delayqueue: lease lost")

	// ErrNotFound is returned by Cancel, Reschedule, Position and Revive
	// when the queue has no such job (waiting, or dead for Revive). After
	// a Cancel or Revive that go-redis resent after a lost reply, it may
	// also mean that the call's own first run cancelled or revived the job.
	ErrNotFound = errors.New("delayqueue: no such job")

	// ErrInFlight is returned by Cancel and Reschedule for a job a consumer
	// holds: it cannot be taken back, only acked or failed by its holder.
	// Revive returns it when a live job already has the dead job's id.
	ErrInFlight = errors.New("delayqueue: job in flight")

	// ErrShutdown is the cause of a handler's context when the worker's
	// shutdown timeout passed before the handler returned. The worker then
	// releases the job (Delivery.Release): due again at once, the attempt
	// not counted.
	ErrShutdown = errors.New("delayqueue: worker shut down before the handler returned")
)
