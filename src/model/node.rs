//! The node view: the fields of Nomad's `Node` that identities name.

use crate::codec::wire_struct;

wire_struct! {
    /// The client node an allocation runs on, as far as identities need it
    /// (Nomad's `Node`; Go sends the whole struct, the other keys are ignored).
    /// Extra-claim templates name these as `${node.id}`, `${node.name}`,
    /// `${node.datacenter}`, `${node.pool}` and `${node.class}`.
    ///
    /// Fields are declared in codec-name order, the order Go's codec writes them.
    pub struct Node {
        /// The datacenter the node is in.
        pub datacenter: String => "Datacenter",
        /// The node ID (a UUID in Nomad).
        pub id: String => "ID",
        /// The node's name.
        pub name: String => "Name",
        /// The node class; empty when none is set.
        pub node_class: String => "NodeClass",
        /// The node pool.
        pub node_pool: String => "NodePool",
        /// What Nomad reports: `initializing`, `ready`, `down` or
        /// `disconnected` (read by state stores deciding whether a node
        /// identity is honoured; see [`NodeState::of`](crate::NodeState::of)).
        pub status: String => "Status",
    }
}
