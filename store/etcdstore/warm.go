package etcdstore

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Warm does now what the client would otherwise do at the first use of
// each message type a run sends or receives: the protobuf runtime builds a
// type's encoders and decoders the first time a message of it is
// marshalled or unmarshalled, which put that work on the critical path of
// the grant, the transactions and the watches (P7). A caller with a core
// to spare runs it in a goroutine of its own, beside the parse of its
// command line. It changes nothing else, and is safe at any time beside
// any other call (the runtime builds each type's coders once, under its
// own lock).
func Warm() {
	// ProtoMethods builds the type's coders (protoimpl's MessageInfo.init).
	// The types of a run: grant, the acquisition, take and release
	// transactions with their compares and operations, keep-alives, the
	// watches, revoke.
	(&pb.LeaseGrantRequest{}).ProtoReflect().ProtoMethods()
	(&pb.LeaseGrantResponse{}).ProtoReflect().ProtoMethods()
	(&pb.ResponseHeader{}).ProtoReflect().ProtoMethods()
	(&pb.TxnRequest{}).ProtoReflect().ProtoMethods()
	(&pb.TxnResponse{}).ProtoReflect().ProtoMethods()
	(&pb.Compare{}).ProtoReflect().ProtoMethods()
	(&pb.RequestOp{}).ProtoReflect().ProtoMethods()
	(&pb.ResponseOp{}).ProtoReflect().ProtoMethods()
	(&pb.PutRequest{}).ProtoReflect().ProtoMethods()
	(&pb.PutResponse{}).ProtoReflect().ProtoMethods()
	(&pb.RangeRequest{}).ProtoReflect().ProtoMethods()
	(&pb.RangeResponse{}).ProtoReflect().ProtoMethods()
	(&pb.DeleteRangeRequest{}).ProtoReflect().ProtoMethods()
	(&pb.DeleteRangeResponse{}).ProtoReflect().ProtoMethods()
	(&mvccpb.KeyValue{}).ProtoReflect().ProtoMethods()
	(&pb.WatchRequest{}).ProtoReflect().ProtoMethods()
	(&pb.WatchCreateRequest{}).ProtoReflect().ProtoMethods()
	(&pb.WatchResponse{}).ProtoReflect().ProtoMethods()
	(&mvccpb.Event{}).ProtoReflect().ProtoMethods()
	(&pb.LeaseKeepAliveRequest{}).ProtoReflect().ProtoMethods()
	(&pb.LeaseKeepAliveResponse{}).ProtoReflect().ProtoMethods()
	(&pb.LeaseRevokeRequest{}).ProtoReflect().ProtoMethods()
	(&pb.LeaseRevokeResponse{}).ProtoReflect().ProtoMethods()
}
