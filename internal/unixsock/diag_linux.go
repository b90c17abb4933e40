package unixsock

import (
	"encoding/binary"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Asking the kernel who bound an abstract name (sock_diag, unix_diag), for
// when connecting to it cannot tell: its listen backlog is full. Nobody
// accepts on a claim, so every connection a newcomer (or anyone, since an
// abstract name has no permissions) makes to it stays queued until the
// holder exits, and once somaxconn of them are queued a connect fails with
// EAGAIN. A claim that could not be told was ignored as a stranger's, and
// the newcomer started beside its live holder.

// From linux/unix_diag.h and linux/tcp_states.h.
const (
	udiagShowName = 0x01
	udiagShowUID  = 0x40
	unixDiagName  = 0
	unixDiagUID   = 7
	tcpListen     = 10
	udiagReqLen   = 24 // struct unix_diag_req
	udiagMsgLen   = 16 // struct unix_diag_msg
)

// listenerUID returns the uid of the owner of a listening socket bound to
// the abstract name, in this network namespace; ok is false when there is
// none or the kernel cannot say.
func listenerUID(name string) (uid int, ok bool) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return -1, false
	}
	defer unix.Close(fd)
	req := make([]byte, unix.NLMSG_HDRLEN+udiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	r := req[unix.NLMSG_HDRLEN:]
	r[0] = unix.AF_UNIX
	ne.PutUint32(r[4:], 1<<tcpListen)
	ne.PutUint32(r[12:], udiagShowName|udiagShowUID)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return -1, false
	}
	want := "\x00" + name
	buf := make([]byte, 64<<10)
	uid, ok = -1, false
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n < unix.NLMSG_HDRLEN {
			return uid, ok
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return uid, ok
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE, unix.NLMSG_ERROR:
				return uid, ok
			}
			if len(m.Data) < udiagMsgLen {
				continue
			}
			got, u, hasUID := "", -1, false
			for attrs := m.Data[udiagMsgLen:]; len(attrs) >= unix.SizeofRtAttr; {
				a := (*unix.RtAttr)(unsafe.Pointer(&attrs[0]))
				l := int(a.Len)
				if l < unix.SizeofRtAttr || l > len(attrs) {
					break
				}
				v := attrs[unix.SizeofRtAttr:l]
				switch a.Type {
				case unixDiagName:
					got = string(v)
				case unixDiagUID:
					if len(v) >= 4 {
						u, hasUID = int(ne.Uint32(v)), true
					}
				}
				l = (l + unix.RTA_ALIGNTO - 1) &^ (unix.RTA_ALIGNTO - 1)
				if l > len(attrs) {
					break
				}
				attrs = attrs[l:]
			}
			if got == want && hasUID {
				uid, ok = u, true
			}
		}
	}
}
