package fault

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/troop-lab/troop/internal/netns"
)

// A delay without netem: iptables sends the packets to delay to an
// NFQUEUE, and a troop process bound to that queue (RunQueue, troop chaos
// delay) lets each go after its delay. Only the packets' metadata comes to
// user space. As with netem, each packet gets its own delay, uniform
// within delay ± jitter, so with a jitter a packet may overtake an earlier
// one. The rule carries --queue-bypass, so that packets pass undelayed
// whenever no process holds the queue, and the queue fails open when
// full: a delay never turns into a loss.

// The NFQUEUE protocol (linux/netfilter/nfnetlink_queue.h), which
// golang.org/x/sys/unix does not define.
const (
	nfqnlMsgPacket       = 0
	nfqnlMsgVerdict      = 1
	nfqnlMsgConfig       = 2
	nfqnlMsgVerdictBatch = 3

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2

	nfqaCfgCmd         = 1
	nfqaCfgParams      = 2
	nfqaCfgQueueMaxlen = 3
	nfqaCfgMask        = 4
	nfqaCfgFlags       = 5

	nfqnlCfgCmdBind  = 1
	nfqnlCopyMeta    = 1
	nfqaCfgFFailOpen = 1
	nfAccept         = 1

	queueMaxLen = 1 << 16 // packets held at once before the queue fails open
)

// QueueConfig is what one delay queue does.
type QueueConfig struct {
	Netns      string // the namespace of the queue: /proc/PID/fd/N or /proc/PID/ns/net
	NetnsInode uint64
	Queue      uint16
	Delay      time.Duration
	Jitter     time.Duration
	Until      time.Time // the queue lets everything go and ends at Until
	Seed       uint64    // of the jitter
}

// queueBoundMsg is what a queue process logs once the kernel has bound
// its queue: the fault waits for it before it queues any packet.
const queueBoundMsg = "delay queue bound"

// maxQueueTime bounds a queue process's life, whatever Until says.
const maxQueueTime = 2 * time.Hour

// RunQueue binds the queue in its namespace and delays its packets until
// ctx ends, Until comes, or the namespace loses its network (its lab or
// container is gone: only loopback is left); then it lets every packet it
// holds go, and returns. Its socket keeps the namespace alive: it must not
// outlive the network it delays.
func RunQueue(ctx context.Context, cfg QueueConfig, log *slog.Logger) error {
	if time.Until(cfg.Until) > maxQueueTime {
		return fmt.Errorf("delay queue: until %s is more than %v away", cfg.Until.Format(time.RFC3339), maxQueueTime)
	}
	ns, err := netns.Open(cfg.Netns, cfg.NetnsInode)
	if err != nil {
		return err
	}
	defer ns.Close()
	var q *nfqueue
	if err := netns.Do(ns, func() error {
		var err error
		q, err = openQueue(cfg.Queue)
		return err
	}); err != nil {
		return fmt.Errorf("delay queue %d: %w", cfg.Queue, err)
	}
	defer q.close()
	ctx, cancel := context.WithDeadline(ctx, cfg.Until)
	defer cancel()
	go func() {
		for ctx.Err() == nil && networked(ns) {
			time.Sleep(200 * time.Millisecond)
		}
		cancel()
	}()
	log.Info(queueBoundMsg, "queue", cfg.Queue, "delay", cfg.Delay.String(), "jitter", cfg.Jitter.String(), "until", cfg.Until.Format(time.RFC3339Nano))
	arrivals := make(chan uint32, queueMaxLen)
	go q.read(ctx, arrivals, log)
	held := q.delay(ctx, arrivals, cfg.Delay, cfg.Jitter, rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Queue))))
	log.Info("delay queue ends", "queue", cfg.Queue, "packets", held, "why", context.Cause(ctx))
	return nil
}

// networked reports whether the namespace has an interface besides
// loopback. An error counts as yes: only a namespace seen without a
// network ends the queue.
func networked(ns *os.File) bool {
	up := true
	netns.Do(ns, func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		up = slices.ContainsFunc(ifs, func(i net.Interface) bool { return i.Flags&net.FlagLoopback == 0 })
		return nil
	})
	return up
}

// nfqueue is a netlink socket bound to one queue.
type nfqueue struct {
	fd  int
	num uint16
	seq uint32
}

func openQueue(num uint16) (*nfqueue, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	q := &nfqueue{fd: fd, num: num}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		q.close()
		return nil, fmt.Errorf("bind netlink socket: %w", err)
	}
	// A large buffer, no ENOBUFS errors (a verdict for a later packet
	// lets a lost notification's packet go too), and a receive timeout so
	// that the reader sees its context end.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000})
	cmd := []byte{nfqnlCfgCmdBind, 0, 0, unix.AF_INET}
	params := binary.BigEndian.AppendUint32(nil, 0xffff) // copy range, unused with metadata only
	params = append(params, nfqnlCopyMeta)
	for _, a := range [][]byte{
		attr(nfqaCfgCmd, cmd),
		attr(nfqaCfgParams, params),
		attr(nfqaCfgQueueMaxlen, binary.BigEndian.AppendUint32(nil, queueMaxLen)),
		append(attr(nfqaCfgFlags, binary.BigEndian.AppendUint32(nil, nfqaCfgFFailOpen)),
			attr(nfqaCfgMask, binary.BigEndian.AppendUint32(nil, nfqaCfgFFailOpen))...),
	} {
		if err := q.request(nfqnlMsgConfig, a); err != nil {
			q.close()
			return nil, err
		}
	}
	return q, nil
}

func (q *nfqueue) close() { unix.Close(q.fd) }

// attr is a netlink attribute, padded to 4 bytes.
func attr(typ uint16, payload []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(payload)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// message is a netfilter netlink message of the queue subsystem for q.
func (q *nfqueue) message(typ uint16, flags uint16, attrs []byte) []byte {
	q.seq++
	b := binary.NativeEndian.AppendUint32(nil, uint32(unix.NLMSG_HDRLEN+4+len(attrs)))
	b = binary.NativeEndian.AppendUint16(b, unix.NFNL_SUBSYS_QUEUE<<8|typ)
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST|flags)
	b = binary.NativeEndian.AppendUint32(b, q.seq)
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = append(b, unix.AF_UNSPEC, unix.NFNETLINK_V0)
	b = binary.BigEndian.AppendUint16(b, q.num)
	return append(b, attrs...)
}

// request sends a config message and waits for the kernel's answer.
func (q *nfqueue) request(typ uint16, attrs []byte) error {
	if err := unix.Sendto(q.fd, q.message(typ, unix.NLM_F_ACK, attrs), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("configure queue %d: %w", q.num, err)
	}
	buf := make([]byte, 8192)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		n, _, err := unix.Recvfrom(q.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("configure queue %d: %w", q.num, err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("configure queue %d: %w", q.num, err)
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || m.Header.Seq != q.seq || len(m.Data) < 4 {
				continue
			}
			if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
				return fmt.Errorf("configure queue %d: %w", q.num, unix.Errno(-code))
			}
			return nil
		}
	}
	return fmt.Errorf("configure queue %d: the kernel did not answer", q.num)
}

// read passes the ID of every packet the kernel queues to arrivals, until
// ctx ends.
func (q *nfqueue) read(ctx context.Context, arrivals chan<- uint32, log *slog.Logger) {
	buf := make([]byte, 1<<16)
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(q.fd, buf, 0)
		if err != nil {
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.ENOBUFS) {
				log.Warn("delay queue: read", "err", err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NFNL_SUBSYS_QUEUE<<8|nfqnlMsgPacket || len(m.Data) < 4 {
				continue
			}
			attrs, err := parseAttrs(m.Data[4:]) // after the nfgenmsg
			if id, ok := attrs[nfqaPacketHdr]; err == nil && ok && len(id) >= 4 {
				select {
				case arrivals <- binary.BigEndian.Uint32(id):
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

func parseAttrs(b []byte) (map[uint16][]byte, error) {
	out := map[uint16][]byte{}
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ unix.NLA_F_NESTED
		if l < 4 || l > len(b) {
			return out, errors.New("bad netlink attribute")
		}
		out[typ] = b[4:l]
		b = b[min((l+3)&^3, len(b)):]
	}
	return out, nil
}

// accept lets packet id go: with nfqnlMsgVerdict that packet alone, with
// nfqnlMsgVerdictBatch every packet up to it (IDs compare modulo 2^32).
func (q *nfqueue) accept(typ uint16, id uint32) error {
	hdr := binary.BigEndian.AppendUint32(nil, nfAccept)
	hdr = binary.BigEndian.AppendUint32(hdr, id)
	return unix.Sendto(q.fd, q.message(typ, 0, attr(nfqaVerdictHdr, hdr)), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// held is a packet held until at.
type held struct {
	id uint32
	at time.Time
}

// heldHeap orders held packets by their time.
type heldHeap []held

func (h heldHeap) Len() int           { return len(h) }
func (h heldHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h heldHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)        { *h = append(*h, x.(held)) }
func (h *heldHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// delay holds each packet of arrivals until its time, arrival + d ±
// jitter; when ctx ends it lets every packet the kernel holds go, those
// it has not heard of yet too. It returns how many packets it delayed.
func (q *nfqueue) delay(ctx context.Context, arrivals <-chan uint32, d, jitter time.Duration, rng *rand.Rand) int {
	var (
		h     heldHeap
		last  uint32 // the last ID heard of
		count int
		timer = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	for {
		if len(h) > 0 {
			timer.Reset(time.Until(h[0].at))
		}
		select {
		case id := <-arrivals:
			at := time.Now().Add(d)
			if jitter > 0 {
				at = at.Add(time.Duration((2*rng.Float64() - 1) * float64(jitter)))
			}
			heap.Push(&h, held{id, at})
			last = id
			count++
		case <-timer.C:
			now := time.Now()
			for len(h) > 0 && !h[0].at.After(now) {
				q.accept(nfqnlMsgVerdict, heap.Pop(&h).(held).id)
			}
		case <-ctx.Done():
			// An ID far past the last one heard of covers every packet
			// queued until now.
			q.accept(nfqnlMsgVerdictBatch, last+1<<30)
			return count
		}
	}
}
