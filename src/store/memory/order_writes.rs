//! The memory store's order writes: add, update and remove, one organization's list
//! replaced whole (readers never wait), each recorded in the events feed and raising its
//! webhook events.

use super::events::{deleted_data, Written};
use super::*;
use crate::store::OrderChange;

impl MemoryStore {
    /// Adds one order to the organization `organization_id`.
    ///
    /// # Errors
    ///
    /// [`InvalidData`](crate::StoreErrorKind::InvalidData) if the organization is unknown, it
    /// has an order with that id, or the order cannot be served ([`EncodedOrder::new`]).
    pub fn add_order(&self, organization_id: &str, order: Order) -> Result<(), StoreError> {
        self.add_orders(organization_id, [order])
    }

    /// Removes the order `order_id` of the organization `organization_id`, and returns whether
    /// it was there.
    pub fn remove_order(&self, organization_id: &str, order_id: &str) -> bool {
        let _writer = self
            .order_writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(current) = self.read().orders.get(organization_id).cloned() else {
            return false;
        };
        let before = current
            .get(order_id)
            .map(|held| held.order().providers.clone());
        let Some(next) = current.without(order_id) else {
            return false;
        };
        self.write()
            .orders
            .insert(organization_id.to_owned(), Arc::new(next));
        self.record_changes(
            organization_id,
            Timestamp::now(),
            [Written {
                change: OrderChange::Deleted,
                order_id: order_id.to_owned(),
                data: deleted_data(order_id),
                before,
                after: None,
            }],
        );
        true
    }

    /// Adds orders to the organization `organization_id`, all or none.
    ///
    /// # Errors
    ///
    /// As [`add_order`](Self::add_order), for any of them; then none is added.
    pub fn add_orders(
        &self,
        organization_id: &str,
        orders: impl IntoIterator<Item = Order>,
    ) -> Result<(), StoreError> {
        let encoded = orders
            .into_iter()
            .map(EncodedOrder::new)
            .collect::<Result<Vec<_>, _>>()?;
        let _writer = self
            .order_writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let current = {
            let state = self.read();
            if !state.organizations.contains_key(organization_id) {
                return Err(unknown_organization(organization_id));
            }
            state
                .orders
                .get(organization_id)
                .cloned()
                .unwrap_or_default()
        };
        // Built outside the lock: readers go on with the current page meanwhile.
        let next = current.with(organization_id, &encoded)?;
        self.write()
            .orders
            .insert(organization_id.to_owned(), Arc::new(next));
        self.record_written(organization_id, Timestamp::now(), &encoded, |_| None);
        Ok(())
    }

    /// Replaces the order of `organization_id` that has `order`'s id with `order`.
    ///
    /// # Errors
    ///
    /// [`NotFound`](crate::StoreErrorKind::NotFound) if the organization has no order with
    /// that id; [`InvalidData`](crate::StoreErrorKind::InvalidData) if the order cannot be
    /// served ([`EncodedOrder::new`]).
    ///
    /// The order's `updatedAt` is the time of this change, unless `order` names one.
    pub fn update_order(&self, organization_id: &str, mut order: Order) -> Result<(), StoreError> {
        let now = Timestamp::now();
        let named_change_time = order.updated_at.is_some();
        order.updated_at.get_or_insert(now);
        let encoded = EncodedOrder::new(order)?;
        let _writer = self
            .order_writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let current = self.read().orders.get(organization_id).cloned();
        let order_id = &encoded.order().id;
        let Some(current) = current else {
            return Err(StoreError::not_found(format!(
                "no order {order_id:?} in this organization"
            )));
        };
        // A write that changes no field is no change: neither its time nor an event.
        let held = current.get(order_id).map(|held| held.order().clone());
        let unchanged = held.as_ref().map(|held| {
            let written = encoded.order();
            Order {
                updated_at: if named_change_time {
                    held.updated_at
                } else {
                    written.updated_at
                },
                ..held.clone()
            } == *written
        });
        let Some(unchanged) = unchanged else {
            return Err(StoreError::not_found(format!(
                "no order {order_id:?} in this organization"
            )));
        };
        if unchanged {
            return Ok(());
        }
        let next = current
            .without(order_id)
            .unwrap_or_default()
            .with(organization_id, std::slice::from_ref(&encoded))?;
        self.write()
            .orders
            .insert(organization_id.to_owned(), Arc::new(next));
        let before = held.map(|held| held.providers);
        self.record_written(organization_id, now, std::slice::from_ref(&encoded), |_| {
            before.clone()
        });
        Ok(())
    }

    /// Records one change per written order at `at` (while the caller holds
    /// `order_writer`): a creation for an order that `before` gives no providers before the
    /// change, else an update; each event's `data` is the order in the newest shape, its
    /// `updatedAt` the event's time.
    fn record_written(
        &self,
        organization_id: &str,
        at: Timestamp,
        orders: &[EncodedOrder],
        before: impl Fn(&Order) -> Option<Vec<String>>,
    ) {
        self.record_changes(
            organization_id,
            at,
            orders.iter().map(|order| {
                let data = if order.order().updated_at == Some(at) {
                    bytes::Bytes::copy_from_slice(order.json())
                } else {
                    let snapshot = Order {
                        updated_at: Some(at),
                        ..order.order().clone()
                    };
                    // Checked when it was encoded; `at` is now, in range.
                    EncodedOrder::new(snapshot)
                        .map(|encoded| bytes::Bytes::copy_from_slice(encoded.json()))
                        .unwrap_or_else(|_| bytes::Bytes::copy_from_slice(order.json()))
                };
                let before = before(order.order());
                Written {
                    change: if before.is_some() {
                        OrderChange::Updated
                    } else {
                        OrderChange::Created
                    },
                    order_id: order.order().id.clone(),
                    data,
                    before,
                    after: Some(order.order().providers.clone()),
                }
            }),
        );
    }
}
