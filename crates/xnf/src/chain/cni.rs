//! `xnf-cni`: the CNI plugin (written by the CNI work item).
